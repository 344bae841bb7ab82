"""The connection under `sdk.memory.redis_store`: one Redis / Valkey client whose every command is
bounded, and whose failures are an outage, not an error.

Each command is bounded (`STATE_TIMEOUT_SECONDS`, or the URL's `?socket_timeout=`, which the `redis`
client reads); a failure starts an outage (logged once): the store's operations answer from this
process meanwhile, their calls' spans say `kvwise.state.degraded` and why, and the store is tried again
`STATE_RETRY_SECONDS` later. A malformed value read (`sdk.memory.values`) is logged and told to the
call that read it the same way.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from time import monotonic
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

from sdk._constants import STATE_RETRY_SECONDS, STATE_TIMEOUT_SECONDS
from sdk.memory.values import _Malformed

logger = logging.getLogger(__name__)

T = TypeVar("T")
_SCHEMES = {"valkey": "redis", "valkeys": "rediss"}
"""Valkey's URL schemes, which the `redis` client reads as its own."""


class RedisLink:
    """One Redis / Valkey client: every command bounded, a failure an outage (logged once) that
    keeps commands away for `STATE_RETRY_SECONDS`; the client reconnects by itself after it."""

    def __init__(self, url: str) -> None:
        try:  # only where a store is asked for: `sdk` imports without it
            import redis
            from redis.backoff import NoBackoff
            from redis.retry import Retry
        except ImportError as missing:
            raise ImportError("sdk.wrap(state=...) needs the redis client: pip install 'kvwise[state]'") from missing

        parts = urlsplit(url)
        scheme = _SCHEMES.get(parts.scheme, parts.scheme)
        if scheme not in ("redis", "rediss", "unix"):
            raise ValueError(
                f"state must be a redis://, rediss://, valkey:// or unix:// URL, got scheme {parts.scheme!r}"
            )
        self._errors: tuple[type[BaseException], ...] = (redis.RedisError, OSError)
        self.redis = redis.Redis.from_url(
            urlunsplit(parts._replace(scheme=scheme)),
            socket_timeout=STATE_TIMEOUT_SECONDS,
            socket_connect_timeout=STATE_TIMEOUT_SECONDS,
            retry=Retry(NoBackoff(), 0),  # a retry would wait past the bound: the call goes on without the store
        )
        self.where = f"{parts.hostname or parts.path}:{parts.port or ''}".rstrip(":")  # no credentials in logs
        self._outage: str | None = None
        self._retry_at = 0.0
        self._lock = threading.Lock()
        self._found = threading.local()  # `reason`: a malformed value this thread's call read (`degraded`)

    def run(self, command: Callable[[Any], T]) -> tuple[bool, T | None]:
        """`(True, command(redis))`, or `(False, None)` when the store failed or is in an outage."""
        if self._outage is not None and monotonic() < self._retry_at:
            return False, None
        try:
            result = command(self.redis)
        except self._errors as error:
            self._failed(error)
            return False, None
        if self._outage is not None:
            with self._lock:
                if self._outage is not None:
                    logger.warning("kvwise state: %s answers again; memories are shared again", self.where)
                    self._outage = None
        return True, result

    def _failed(self, error: BaseException) -> None:
        reason = f"{type(error).__name__}: {error}"[:200]
        with self._lock:
            if self._outage is None:
                logger.warning("kvwise state: %s failed (%s); calls go on with in-process state", self.where, reason)
            self._outage = reason
            self._retry_at = monotonic() + STATE_RETRY_SECONDS

    def outage(self) -> str | None:
        """Why the store is failing now (None: it is not)."""
        return self._outage

    def malformed(self, error: _Malformed, *, during_call: bool = True) -> None:
        """A value read was malformed (the caller drops it): logged, and told to this thread's call
        by `degraded` where it was read `during_call` (not at a call's end)."""
        logger.warning("kvwise state: %s held a %s; it is dropped", self.where, error)
        if during_call:
            self._found.reason = error.reason

    def degraded(self) -> str | None:
        """Why this thread's call could not use the store: an outage, or a malformed value it read."""
        found, self._found.reason = getattr(self._found, "reason", None), None
        return self._outage or found
