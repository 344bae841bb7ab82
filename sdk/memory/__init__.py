"""Where a wrapped client's memories live: one store interface and its three implementations.

It imports no feature: the features keep their records here, and `sdk.memories` puts them together.

records.py       what the stores still know by name (fingerprints, leaders, window keys): plain values
store.py         the `Store` interface, a feature's `Codec` for its own records, `LocalStore` (`state="memory"`)
sqlite_store.py  `SqliteStore`, in one SQLite file per machine, shared by its processes (the default)
sqlite_link.py   its file: opening, layout, eviction, a failure an outage
redis_store.py   `RedisStore`, in Redis / Valkey, shared by a fleet (key layout there)
redis_link.py    its connection: bounded commands, an outage instead of an error
outage.py        a store outside the process that fails: logged once, told to the calls' spans
values.py        what a stored value must be to be read back
place.py         the store `state` / $KVWISE_STATE_URL chooses, and whose it is (a hash of the credentials)
"""
