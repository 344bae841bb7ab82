"""The memories in one SQLite file on this machine (the default): what one run learns serves the next.

    sdk.wrap(client)                                    # $XDG_CACHE_HOME/kvwise/state.sqlite3, else ~/.cache/kvwise/
    sdk.wrap(client, state="sqlite:///path/to/file")    # another file (or KVWISE_STATE_URL)
    sdk.wrap(client, state="memory")                    # in this process only, gone when it ends

A CLI agent started once per task, a cron job, a serverless function: each run learns from the runs
before it on the same machine which volatile bytes really change (`sdk.prompt.families`), each
workload's output lengths (`sdk.decode.adaptive_caps`) and the last call's fingerprint, against which
its first call's cache break is explained (`sdk.cache.fingerprint`). Any number of processes share
the file at once: a family's record is read and replaced in one write transaction, an answer is one
row added, so no update is lost. Per tenant (a hash of the client's credentials and base URL, in
every key), only hashes and counts, as `sdk.memory.sqlite_link` lays them out.

What a call costs: a read is answered from this process while the file says no other process
wrote since (`PRAGMA data_version`, one statement), a record that did not change is not written, a
commit is not synced to the disk, and the fingerprint of each API and model is read once per process
and written when the process ends (or at the file's next use after the client is collected); every
client of the process shares one connection and its read cache. Fan-out leaders stay in the process:
waiting on another process would mean polling the file.

Faults never reach the call (`sdk.memory.sqlite_link`): the store answers from its own `LocalStore`
while the file fails, and a malformed value read is dropped (overwritten by this call's), logged, and
told to the call's span, as in Redis (`sdk.memory.values`).
"""

from __future__ import annotations

import functools
import json
import sqlite3
import weakref
from collections.abc import Callable
from pathlib import Path
from time import time
from typing import Any

from sdk._constants import (
    ADAPTIVE_CAP_WINDOW,
    STATE_MAX_OUTPUT_TOKENS,
    STATE_SQLITE_TOUCH_SECONDS,
)
from sdk.memory.records import Leader, Seen, WindowsKey, digest, hashed_segment
from sdk.memory.sqlite_link import WORKLOAD, SqliteLink, defer, shared_link
from sdk.memory.store import Codec, Held, LocalStore, R
from sdk.memory.values import _Malformed, checked_value, decode_seen, encode_seen

Row = tuple[bytes, float] | None
"""A record's row: its value and when it was last used (None: there is none)."""
_SEEN, _VALUE = "seen", "value"
_SELECT = "SELECT value, used FROM record WHERE kind = ? AND key = ?"
_UPSERT = (
    "INSERT INTO record (kind, key, value, used) VALUES (?, ?, ?, ?)"
    " ON CONFLICT (kind, key) DO UPDATE SET value = excluded.value, used = excluded.used"
)
_WINDOW = (
    "SELECT value FROM {0} WHERE workload = ? AND typeof(value) = 'integer' AND value BETWEEN 0 AND ?"
    " ORDER BY seq DESC LIMIT ?"
)
_PUSH = "INSERT INTO {0} (workload, value) VALUES (?, ?)"
_TRIM = (
    "DELETE FROM {0} WHERE workload = ?1"
    " AND seq <= (SELECT seq FROM {0} WHERE workload = ?1 ORDER BY seq DESC LIMIT 1 OFFSET ?2)"
)


class SqliteStore:
    """A `Store` (`sdk.memory.store`) in the SQLite file at `path`, shared by every process on the
    machine that wraps a client with the same credentials (`tenant`); see the module."""

    def __init__(self, path: Path, tenant: str, link: SqliteLink | None = None) -> None:
        self.link = link or shared_link(path)  # a link of its own: as another process would open the file
        self._tenant = tenant
        self._local = LocalStore()  # where the memories live while the file fails, and the fan-out leaders
        self._unsaved: dict[tuple[bytes, bytes], Seen] = {}  # fingerprints to write when the process ends
        self._seen_keys: dict[tuple[str, str], tuple[bytes, bytes]] = {}  # per API and model: theirs, the API's
        weakref.finalize(self, _save, path, self._unsaved)

    def _key(self, kind: str, *parts: object) -> bytes:
        return bytes.fromhex(digest(self._tenant, kind, *parts))

    def update_record(self, codec: Codec[R], key: bytes, update: Callable[[R | None], R]) -> R:
        read = functools.partial(self._record, codec)
        done, record = self._replace(codec.kind, self._key(codec.kind, key.hex()), read, codec.encode, update)
        return record if done and record is not None else self._local.update_record(codec, key, update)

    def update_value(self, kind: str, key: bytes, update: Callable[[str | None], str | None]) -> str | None:
        stored_key = self._key(_VALUE, kind, key.hex())
        done, value = self._replace(f"{_VALUE}:{kind}", stored_key, self._value, checked_value, update)
        return value if done else self._local.update_value(kind, key, update)

    def _replace(
        self,
        kind: str,
        key: bytes,
        read: Callable[[Row], Any],
        write: Callable[[Any], str],
        update: Callable[[Any], Any],
    ) -> tuple[bool, Any]:
        """`(True, update(what is kept))`, kept in its place; `(False, None)` where the file failed.
        Nothing is written where it did not change (and was used lately)."""

        def change(db: sqlite3.Connection) -> Any:
            row = self.link.cached(db, kind, key, lambda: db.execute(_SELECT, (kind, key)).fetchone())
            last = read(row)
            value = update(last)
            if value == last and (row is None or time() - row[1] < STATE_SQLITE_TOUCH_SECONDS):
                return value  # nothing new: nothing written
            with self.link.writing(db):
                fresh = db.execute(_SELECT, (kind, key)).fetchone()
                if fresh != row:  # another process wrote it since: learn on top of what it learnt
                    value = update(read(fresh))
                if value is None:
                    stored = None
                    db.execute("DELETE FROM record WHERE kind = ? AND key = ?", (kind, key))
                else:
                    stored = (write(value).encode(), time())
                    db.execute(_UPSERT, (kind, key, *stored))
            self.link.remember(kind, key, stored)
            return value

        return self.link.run(change)

    def _record(self, codec: Codec[R], row: Row) -> R | None:
        if row is None:
            return None
        try:
            return codec.decode(row[0])
        except _Malformed as error:  # dropped: this call's record overwrites it
            self.link.outages.malformed(error)
            return None

    def _value(self, row: Row) -> str | None:
        if row is None:
            return None
        stored = row[0]
        if isinstance(stored, str):
            return stored
        try:
            if isinstance(stored, bytes):
                return stored.decode()
        except UnicodeDecodeError:
            pass
        self.link.outages.malformed(_Malformed(_VALUE, "not text"))  # dropped: this call's value overwrites it
        return None

    def lengths(self, workload: WindowsKey) -> list[int]:
        key = self._key(WORKLOAD, *workload)

        def read(db: sqlite3.Connection) -> list[int]:
            query = _WINDOW.format("length")
            found = self.link.cached(
                db,
                WORKLOAD,
                key,
                lambda: db.execute(query, (key, STATE_MAX_OUTPUT_TOKENS, ADAPTIVE_CAP_WINDOW)).fetchall(),
            )
            return [length for (length,) in found]

        done, lengths = self.link.run(read)
        return lengths if done and lengths is not None else self._local.lengths(workload)

    def push_answer(self, workload: WindowsKey, length: int | None, cut: bool | None) -> int:
        key = self._key(WORKLOAD, *workload)

        def push(db: sqlite3.Connection) -> int:
            with self.link.writing(db):
                for table, value in (("length", length), ("cut", cut)):
                    if value is not None:
                        db.execute(_PUSH.format(table), (key, int(value)))
                        db.execute(_TRIM.format(table), (key, ADAPTIVE_CAP_WINDOW))
                db.execute(_UPSERT, (WORKLOAD, key, b"", time()))
                window = db.execute(_WINDOW.format("cut"), (key, 1, ADAPTIVE_CAP_WINDOW)).fetchall()
            self.link.forget(WORKLOAD, key)
            return sum(value for (value,) in window) if cut is not None else 0

        done, cuts = self.link.run(push)
        return cuts if done and cuts is not None else self._local.push_answer(workload, length, cut)

    def forget(self, workload: WindowsKey) -> None:
        key = self._key(WORKLOAD, *workload)

        def drop(db: sqlite3.Connection) -> None:
            with self.link.writing(db):
                for table in ("length", "cut"):
                    db.execute(f"DELETE FROM {table} WHERE workload = ?", (key,))
                db.execute("DELETE FROM record WHERE kind = ? AND key = ?", (WORKLOAD, key))
            self.link.forget(WORKLOAD, key)

        done, _ = self.link.run(drop)
        if not done:
            self._local.forget(workload)

    def exchange_seen(self, api: str, seen: Seen) -> tuple[Seen | None, Seen | None]:
        seen.hash_settings()
        previous, latest = self._local.exchange_seen(api, seen)
        keys = self._seen_keys.get((api, seen.model))
        if keys is None:
            keys = self._seen_keys[(api, seen.model)] = (self._key(_SEEN, api, seen.model), self._key(_SEEN, api))
        if previous is None or latest is None:  # this process's first call of the API (and model): the file's
            done, rows = self.link.run(lambda db: [db.execute(_SELECT, (_SEEN, key)).fetchone() for key in keys])
            stored = [self._seen(row) for row in rows or ()] if done else [None, None]
            previous, latest = previous or stored[0], latest or stored[1]
        self._unsaved.pop(keys, None)
        self._unsaved[keys] = seen  # the last one written is the API's latest
        return previous, latest

    def _seen(self, row: tuple[bytes, float] | None) -> Seen | None:
        if row is None:
            return None
        try:
            stored, message_id = json.loads(row[0])
            fields = {b"seen": stored.encode()} | ({} if message_id is None else {b"id": message_id.encode()})
        except (ValueError, TypeError, AttributeError):
            self.link.outages.malformed(_Malformed(_SEEN, "wrong type"))
            return None
        try:
            return decode_seen(_SEEN, fields)
        except _Malformed as error:
            self.link.outages.malformed(error)
            return None

    def join(self, key: bytes, span_id: str | None) -> tuple[Leader | None, Leader | None]:
        return self._local.join(key, span_id)

    def release(self, leader: Leader) -> None:
        self._local.release(leader)

    def wait(self, leader: Leader, timeout: float) -> None:
        self._local.wait(leader, timeout)

    async def await_release(self, leader: Leader, timeout: float) -> None:
        await self._local.await_release(leader, timeout)

    def outage(self) -> str | None:
        return self.link.outages.reason()

    def held(self, kind: Held) -> int:
        return self._local.held(kind)


def _save(path: Path, unsaved: dict[tuple[bytes, bytes], Seen]) -> None:
    """Leave the last fingerprint of each API and model (and each API's latest) to be written to the
    file, as hashes: run by the garbage collector, it defers the write (`sdk.memory.sqlite_link`)."""
    if not unsaved:
        return
    kept = [(keys, _hashed(seen)) for keys, seen in unsaved.items()]
    unsaved.clear()

    def write(link: SqliteLink, db: sqlite3.Connection) -> None:
        with link.writing(db):
            for keys, value in kept:
                for key in keys:
                    db.execute(_UPSERT, (_SEEN, key, value, time()))

    defer(path, write)


def _hashed(seen: Seen) -> bytes:
    """A fingerprint as the file keeps it: hashes, and the answer's id."""
    hashed = Seen(seen.model, [hashed_segment(segment, None) for segment in seen.chain], seen.settings, seen.at)
    return json.dumps([encode_seen(hashed), seen.message_id]).encode()
