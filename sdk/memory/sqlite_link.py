"""The file under `sdk.memory.sqlite_store`: one SQLite connection, its layout, and its failures as an outage.

The file is opened on first use, in WAL mode (readers never wait on a writer) with `synchronous=NORMAL`
(a commit is not synced to the disk: a power cut may lose the last memories, never the file), and
never grown past `STATE_SQLITE_MAX_BYTES`. A write waits at most `STATE_SQLITE_BUSY_SECONDS` for
another process's; opening waits up to `STATE_SQLITE_OPEN_SECONDS`, since the process that creates the
file, or checkpoints it as the last to close it, holds it through several disk syncs (seconds on a slow
disk). Anything that goes wrong (the file locked past that wait, corrupt, full, on a read-only disk, too
large, or laid out by a newer kvwise) is an outage (`sdk.memory.outage`): logged
once, the calls go on with in-process state and their spans say why, and the file is tried again
`STATE_SQLITE_RETRY_SECONDS` later.

Layout (`STATE_SQLITE_SCHEMA`, in the file's `user_version`), hashes and counts only:

    record(kind, key, value, used)   a family's record, a call's fingerprint: `key` a hash (tenant included),
                                     `value` hashes as JSON (`sdk.memory.values`; a feature's record: its
                                     `Codec`'s text, under its kind), `used` when last used
    length(seq, workload, value)     a workload's recent output lengths, at most `ADAPTIVE_CAP_WINDOW` each
    cut(seq, workload, value)        per adaptively capped answer of a workload, 1 if it reached its cap

Records of each kind are kept at most `STATE_SQLITE_MAX_RECORDS` (workloads `STATE_SQLITE_MAX_WORKLOADS`),
the least recently used dropped first, and none unused for `STATE_EXPIRY_SECONDS`.

A process keeps one link per file (`shared_link`), whatever number of clients it wraps: the file is
opened, laid out and evicted once, and what one client wrote, another reads from the same read cache.
A collected client's last writes are `defer`red, never done by the garbage collector: it may run
inside a write transaction of the same thread, which a second connection would wait on until the
busy wait gave up (a stall, then an outage). They are done at the file's next use, or at exit.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from time import time
from typing import Any, TypeVar

from sdk._constants import (
    STATE_EXPIRY_SECONDS,
    STATE_SQLITE_BUSY_SECONDS,
    STATE_SQLITE_CACHED,
    STATE_SQLITE_EVICT_EVERY,
    STATE_SQLITE_MAX_BYTES,
    STATE_SQLITE_MAX_RECORDS,
    STATE_SQLITE_MAX_WORKLOADS,
    STATE_SQLITE_OPEN_FILES,
    STATE_SQLITE_OPEN_SECONDS,
    STATE_SQLITE_RETRY_SECONDS,
    STATE_SQLITE_SCHEMA,
)
from sdk.memory.outage import Outage

T = TypeVar("T")
Deferred = Callable[["SqliteLink", sqlite3.Connection], None]
"""A write left for the file's next use (`defer`)."""
WORKLOAD = "workload"
"""The record kind that marks a workload's answer windows as used (their eviction follows it)."""

_LAYOUT = (
    "CREATE TABLE IF NOT EXISTS record (kind TEXT NOT NULL, key BLOB NOT NULL, value BLOB NOT NULL,"
    " used REAL NOT NULL, PRIMARY KEY (kind, key)) WITHOUT ROWID",
    "CREATE INDEX IF NOT EXISTS record_used ON record (kind, used)",
    "CREATE TABLE IF NOT EXISTS length (seq INTEGER PRIMARY KEY, workload BLOB NOT NULL, value INTEGER NOT NULL)",
    "CREATE INDEX IF NOT EXISTS length_workload ON length (workload, seq)",
    "CREATE TABLE IF NOT EXISTS cut (seq INTEGER PRIMARY KEY, workload BLOB NOT NULL, value INTEGER NOT NULL)",
    "CREATE INDEX IF NOT EXISTS cut_workload ON cut (workload, seq)",
    f"PRAGMA user_version = {STATE_SQLITE_SCHEMA}",
)


class _Unusable(Exception):
    """The file cannot be used, for a reason SQLite does not give (too large, a newer layout)."""


class SqliteLink:
    """One connection to the file at `path`, shared by a wrapped client's threads (one at a time):
    every use of it bounded, a failure an outage (see the module)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.outages = Outage(str(path), STATE_SQLITE_RETRY_SECONDS)
        self._db: sqlite3.Connection | None = None
        self._pid = 0  # the process that opened `_db`: a forked child opens its own
        self._inherited: sqlite3.Connection | None = None
        self._lock = threading.RLock()
        self._writes = 0
        self._cache: dict[tuple[str, bytes], Any] = {}  # what was read, while no other connection writes
        self._version: tuple[sqlite3.Connection, int] | None = None  # the file's data_version when it was read

    def run(self, command: Callable[[sqlite3.Connection], T]) -> tuple[bool, T | None]:
        """`(True, command(connection))`, or `(False, None)` when the file failed or is in an outage;
        a transaction `command` left open is rolled back."""
        if self.outages.waiting():
            return False, None
        with self._lock:
            db = self._db
            try:
                if db is not None and self._pid != os.getpid():  # forked: SQLite's rule is to leave it alone
                    self._inherited, db = db, None
                if db is None:
                    db = self._db = self._open()
                for deferred in _DEFERRED.pop(self.path, ()):
                    deferred(self, db)
                result = command(db)
            except (sqlite3.Error, OSError, _Unusable) as error:
                self._failed(error)
                return False, None
        self.outages.answered()
        return True, result

    def cached(self, db: sqlite3.Connection, kind: str, key: bytes, fetch: Callable[[], T]) -> T:
        """`fetch()`, or what it answered before if no other connection wrote to the file since."""
        version = (db, db.execute("PRAGMA data_version").fetchone()[0])
        if version != self._version or len(self._cache) >= STATE_SQLITE_CACHED:
            self._cache.clear()
            self._version = version
        found = self._cache.get((kind, key), _MISSING)
        if found is _MISSING:
            found = self._cache[(kind, key)] = fetch()
        return found  # type: ignore[no-any-return]

    def remember(self, kind: str, key: bytes, row: Any) -> None:
        """What this connection just wrote under `kind` and `key`."""
        self._cache[(kind, key)] = row

    def forget(self, kind: str, key: bytes) -> None:
        """What was read under `kind` and `key` is no longer what the file holds."""
        self._cache.pop((kind, key), None)

    def close(self) -> None:
        """Close the connection (the next `run` opens it again)."""
        with self._lock:
            db, self._db = self._db, None
            if db is not None and self._pid == os.getpid():
                db.close()

    def _failed(self, error: BaseException) -> None:
        db, self._db = self._db, None  # opened again after the outage
        if db is not None:
            try:
                db.close()  # rolls back an open transaction
            except sqlite3.Error:
                pass
        self.outages.failed(str(error) if isinstance(error, _Unusable) else f"{type(error).__name__}: {error}")

    @contextmanager
    def writing(self, db: sqlite3.Connection) -> Iterator[None]:
        """One write transaction, taken at once (`BEGIN IMMEDIATE`: a read-then-write is never
        interleaved with another process's, so no update is lost); every few writes it also evicts."""
        db.execute("BEGIN IMMEDIATE")
        try:
            yield
            self._writes += 1
            if self._writes % STATE_SQLITE_EVICT_EVERY == 0:
                _evict(db)
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise

    def _open(self) -> sqlite3.Connection:
        """The file, opened (created where it is not there yet), checked, and laid out."""
        if not self.path.is_absolute():  # no home directory to put the cache directory in
            raise _Unusable(f"no cache directory: {self.path} is not an absolute path")
        if self.path.exists() and (size := self.path.stat().st_size) > STATE_SQLITE_MAX_BYTES:
            raise _Unusable(f"the file is too large ({size} bytes, at most {STATE_SQLITE_MAX_BYTES})")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        db = sqlite3.connect(
            self.path, timeout=STATE_SQLITE_OPEN_SECONDS, isolation_level=None, check_same_thread=False
        )
        try:
            if db.execute("PRAGMA journal_mode = WAL").fetchone()[0] != "wal":
                raise _Unusable("the file cannot be put in WAL mode")
            db.execute("PRAGMA synchronous = NORMAL")
            db.execute(
                f"PRAGMA max_page_count = {STATE_SQLITE_MAX_BYTES // db.execute('PRAGMA page_size').fetchone()[0]}"
            )
            with self.writing(db):
                version = db.execute("PRAGMA user_version").fetchone()[0]
                if version > STATE_SQLITE_SCHEMA:
                    newer = f"layout {version}, this one reads {STATE_SQLITE_SCHEMA}"
                    raise _Unusable(f"the file was laid out by a newer kvwise ({newer})")
                if version < STATE_SQLITE_SCHEMA:
                    for statement in _LAYOUT:
                        db.execute(statement)
                _evict(db)
            db.execute(f"PRAGMA busy_timeout = {int(STATE_SQLITE_BUSY_SECONDS * 1000)}")
        except BaseException:
            db.close()
            raise
        self._pid = os.getpid()
        return db


def _evict(db: sqlite3.Connection) -> None:
    """Drop the records unused for `STATE_EXPIRY_SECONDS`, then the least recently used past each
    kind's cap, and the answer windows of the workloads dropped."""
    dropped = 0
    for (kind,) in db.execute("SELECT DISTINCT kind FROM record").fetchall():
        cap = STATE_SQLITE_MAX_WORKLOADS if kind == WORKLOAD else STATE_SQLITE_MAX_RECORDS
        expired = db.execute("DELETE FROM record WHERE kind = ? AND used < ?", (kind, time() - STATE_EXPIRY_SECONDS))
        evicted = db.execute(
            "DELETE FROM record WHERE kind = ?1 AND key IN"
            " (SELECT key FROM record WHERE kind = ?1 ORDER BY used DESC LIMIT -1 OFFSET ?2)",
            (kind, cap),
        )
        dropped += (expired.rowcount + evicted.rowcount) if kind == WORKLOAD else 0
    if dropped:
        for table in ("length", "cut"):
            db.execute(
                f"DELETE FROM {table} WHERE workload NOT IN (SELECT key FROM record WHERE kind = ?)", (WORKLOAD,)
            )


_MISSING: Any = object()
_SHARED: OrderedDict[Path, SqliteLink] = OrderedDict()  # the most recently used last
_SHARED_LOCK = threading.Lock()
_DEFERRED: dict[Path, list[Deferred]] = {}


def shared_link(path: Path) -> SqliteLink:
    """This process's link to the file at `path`, shared by every client it wraps (see the module); past
    `STATE_SQLITE_OPEN_FILES` files, the least recently used one's connection is closed."""
    with _SHARED_LOCK:
        link = _SHARED.pop(path, None) or SqliteLink(path)
        _SHARED[path] = link
        closed = [_SHARED.popitem(last=False)[1] for _ in range(len(_SHARED) - STATE_SQLITE_OPEN_FILES)]
    for idle in closed:
        idle.close()
    return link


def defer(path: Path, write: Deferred) -> None:
    """Leave `write` to the next use of the file at `path` in this process, or to its exit: safe where
    the garbage collector runs it (no I/O, no lock)."""
    _DEFERRED.setdefault(path, []).append(write)


def _write_deferred() -> None:
    for path in list(_DEFERRED):
        shared_link(path).run(lambda db: None)


class _Exit:
    """Alive until the interpreter exits, when its finalizer writes what was deferred: made at import,
    before any store, it runs after every store's own finalizer (finalizers run newest first at exit)."""


_AT_EXIT = _Exit()
weakref.finalize(_AT_EXIT, _write_deferred)
