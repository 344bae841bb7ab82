"""Where a wrapped client's memories live: one store interface and its two implementations.

records.py      what the memories keep (family records, fingerprints, leaders): plain values
store.py        the `Store` interface, and `LocalStore` in this process (the default)
redis_store.py  `RedisStore`, in Redis / Valkey, shared by a fleet (key layout there)
redis_link.py   its connection: bounded commands, an outage instead of an error
values.py       what a stored value must be to be read back
memories.py     a wrapped client's four memories on their store
"""
