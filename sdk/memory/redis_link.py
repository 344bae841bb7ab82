"""The connection under `sdk.memory.redis_store`: one Redis / Valkey client whose every command is
bounded, and whose failures are an outage, not an error.

Each command is bounded (`STATE_TIMEOUT_SECONDS`, or the URL's `?socket_timeout=`, which the `redis`
client reads); a failure starts an outage (`sdk.memory.outage`): the store's operations answer from
this process meanwhile, and the store is tried again `STATE_RETRY_SECONDS` later.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

from sdk._constants import STATE_RETRY_SECONDS, STATE_TIMEOUT_SECONDS
from sdk.memory.outage import Outage

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
        where = f"{parts.hostname or parts.path}:{parts.port or ''}".rstrip(":")  # no credentials in logs
        self.outages = Outage(where, STATE_RETRY_SECONDS)

    def run(self, command: Callable[[Any], T]) -> tuple[bool, T | None]:
        """`(True, command(redis))`, or `(False, None)` when the store failed or is in an outage."""
        if self.outages.waiting():
            return False, None
        try:
            result = command(self.redis)
        except self._errors as error:
            self.outages.failed(f"{type(error).__name__}: {error}")
            return False, None
        self.outages.answered()
        return True, result
