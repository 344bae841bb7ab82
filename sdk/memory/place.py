"""The store a wrapped client's memories live in: a SQLite file on this machine (the default,
`sdk.memory.sqlite_store`), this process's (`state="memory"`), or Redis / Valkey's (`sdk.memory.redis_store`);
the two outside the process are shared by every process that wraps a client with the same credentials.

    state / $KVWISE_STATE_URL     where
    (neither)                     $XDG_CACHE_HOME/kvwise/state.sqlite3, else ~/.cache/kvwise/state.sqlite3
    "memory"                      this process
    "sqlite:///path/to/file"      that file ("sqlite://": the default one)
    "redis://host:6379/0"         Redis or Valkey (rediss://, valkey://, valkeys://, unix:// too)

Which memories a client has on it is the features' business (`sdk.memories`), not the store's.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from sdk._constants import STATE_CACHE_ENV, STATE_MEMORY, STATE_SQLITE_FILE, STATE_URL_ENV
from sdk.memory.redis_store import RedisStore
from sdk.memory.sqlite_store import SqliteStore
from sdk.memory.store import LocalStore, Store

_CREDENTIALS = ("api_key", "auth_token", "organization", "project", "base_url")


@dataclass(frozen=True, slots=True)
class Place:
    """A store, and `outage()`: why it failed this thread's call (None: it did not); `outage` is
    None itself for a store in this process, which cannot fail."""

    store: Store
    outage: Callable[[], str | None] | None


def place_for(client: Any, state: str | None, lease_seconds: float) -> Place:
    """The store of `client`'s memories that `state` names (else $KVWISE_STATE_URL, else the default
    SQLite file): see the module. A leader's lease in Redis lasts `lease_seconds`."""
    url = state if state is not None else os.environ.get(STATE_URL_ENV) or "sqlite://"
    if url == STATE_MEMORY:
        return Place(LocalStore(), None)
    tenant = credentials_hash(client)
    if url.startswith("sqlite:"):
        sqlite = SqliteStore(sqlite_path(url), tenant)
        return Place(sqlite, sqlite.link.outages.reason_for_call)
    redis = RedisStore(url, f"kvwise:{tenant}", lease_seconds)
    return Place(redis, redis.link.outages.reason_for_call)


def sqlite_path(url: str) -> Path:
    """The file a "sqlite://" URL names: its path ("sqlite:///tmp/kvwise.sqlite3"), else the default one
    under the user's cache directory ($XDG_CACHE_HOME where it is an absolute path, else ~/.cache)."""
    parts = urlsplit(url)
    if parts.netloc or parts.query or parts.fragment:
        raise ValueError(f"state must be sqlite:///path/to/file (an absolute path) or sqlite://, got {url!r}")
    if parts.path:
        return Path(unquote(parts.path))
    cache = os.environ.get(STATE_CACHE_ENV, "")
    return (Path(cache) if os.path.isabs(cache) else Path.home() / ".cache") / STATE_SQLITE_FILE


def credentials_hash(client: Any) -> str:
    """A hash of the client's credentials and server: who may share a cache, a wait or a memory."""
    digest = hashlib.blake2b(digest_size=16)
    for name in _CREDENTIALS:
        # A resource the client makes on first read (anthropic's `organization`) is no credential:
        # reading it would leave it on the live client, and its text differs per client.
        made = isinstance(inspect.getattr_static(type(client), name, None), functools.cached_property)
        digest.update(str(None if made else getattr(client, name, None)).encode("utf-8", "surrogatepass"))
        digest.update(b"\x00")
    return digest.hexdigest()
