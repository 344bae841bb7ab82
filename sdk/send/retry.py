"""The retry rules: which failures are sent again, how many times, and how long to wait between.

Exponential backoff with jitter, honouring Retry-After; `sdk.send.attempts` runs every attempt
under these rules with tenacity. What is sent again is what the bare client's own retry loop sends
again, decided by its own rules (`sdk.compat.client_would_retry`): a failure before any answer (a
refused or dropped connection, a timeout, a body cut short in transfer), and an error answer its
`_should_retry` accepts (`x-should-retry`, 408, 409, 429, 5xx). Never a 200 whose body is not
JSON, and never a stream once its 200 arrived (`sdk.send.stream_watch`): the provider accepted that
request and may bill every copy. Each attempt carries its number in `x-stainless-retry-count`, as
the clients' own retries do. The wrapped client's own retries are turned off so attempts never
multiply; when the attempts run out the caller gets the client's own exception.

How many retries (`retries_for`): the caller's own `max_retries` where they set one, and
`Policy.retries` only where they did not, so a wrapped client makes no more attempts than the bare
one would. In order: the request's options (`client.post(..., options={"max_retries": 0})`), then
the client's (its constructor's or `with_options(max_retries=...)`'s: openai-agents and pydantic-ai
pass theirs so). The clients keep no trace of whether `max_retries` was given, only its value, so
"set none" is told by that value: the client class's own default (`DEFAULT_MAX_RETRIES`, 2, read
from its constructor's signature) counts as none. So `max_retries=2` said out loud gets
`Policy.retries` too, which under the default Policy is the same 2.
"""

from __future__ import annotations

import email.utils
import inspect
import math
import sys
import time
from collections.abc import Mapping
from functools import cache
from typing import Any

from tenacity import RetryCallState, wait_exponential, wait_random
from tenacity.wait import wait_base

from sdk._constants import (
    RETRY_AFTER_CAP_SECONDS,
    RETRY_INITIAL_DELAY_SECONDS,
    RETRY_JITTER_SECONDS,
    RETRY_MAX_DELAY_SECONDS,
)
from sdk.compat import client_would_retry

CLIENT_MODULES = ("openai", "anthropic")


def _error_classes() -> tuple[tuple[type[BaseException], ...], tuple[type[BaseException], ...]]:
    """(connection errors, status errors) of the clients this process has imported.

    Only imported ones: a client that was never imported made no call, and importing anthropic for
    an openai app would cost it seconds and memory. Looked up once per set of loaded clients."""
    return _error_classes_of(tuple(name for name in CLIENT_MODULES if name in sys.modules))


@cache
def _error_classes_of(
    modules: tuple[str, ...],
) -> tuple[tuple[type[BaseException], ...], tuple[type[BaseException], ...]]:
    loaded = [sys.modules[name] for name in modules]
    return tuple(m.APIConnectionError for m in loaded), tuple(m.APIStatusError for m in loaded)


def is_retryable(error: BaseException, client: Any) -> bool:
    """Whether `client`'s own retries would send the request again after an attempt raised `error`."""
    connection, status = _error_classes()
    return client_would_retry(client, error, status, connection)


def retry_after_seconds(error: BaseException | None) -> float | None:
    """The server's Retry-After hint in seconds: `retry-after-ms`, then seconds, then an HTTP date.

    Used only when finite and 0 < value <= RETRY_AFTER_CAP_SECONDS.
    """
    response = getattr(error, "response", None)
    headers = getattr(response, "headers", None)
    if headers is None:
        return None
    value: float | None = None
    if (ms := headers.get("retry-after-ms")) is not None:
        value = _as_float(ms, scale=1000.0)
    if value is None and (raw := headers.get("retry-after")) is not None:
        value = _as_float(raw)
        if value is None and (date := _parse_date(raw)) is not None:
            value = date - time.time()
    if value is None or not math.isfinite(value) or not 0 < value <= RETRY_AFTER_CAP_SECONDS:
        return None
    return value


def _as_float(text: str, scale: float = 1.0) -> float | None:
    try:
        return float(text) / scale
    except ValueError:
        return None


def _parse_date(text: str) -> float | None:
    parsed = email.utils.parsedate_tz(text)
    return email.utils.mktime_tz(parsed) if parsed is not None else None


class wait_retry_after(wait_base):
    """Wait what the server's Retry-After says, else fall back to `fallback`."""

    def __init__(self, fallback: wait_base) -> None:
        self.fallback = fallback

    def __call__(self, retry_state: RetryCallState) -> float:
        outcome = retry_state.outcome
        hint = retry_after_seconds(outcome.exception() if outcome is not None else None)
        return hint if hint is not None else self.fallback(retry_state)


def retries_for(client: Any, options: Mapping[str, Any] | None, default: int) -> int:
    """The retries of one call through `client` with request `options`: the caller's `max_retries`,
    else `default` (`Policy.retries`); see the module docstring."""
    if (asked := _count((options or {}).get("max_retries"))) is not None:
        return asked
    own = _count(getattr(client, "max_retries", None))
    if own is not None and own != _default_max_retries(client.__class__):
        return own
    return default


def _count(value: Any) -> int | None:
    """`value` if it is a number of retries (the clients' `NotGiven` and anything else is not)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


@cache
def _default_max_retries(client_class: type) -> Any:
    """The `max_retries` a client class gets when its caller passes none (its constructor's default)."""
    try:
        parameter = inspect.signature(client_class).parameters.get("max_retries")
    except (TypeError, ValueError):
        return None
    return parameter.default if parameter is not None else None


def backoff() -> wait_base:
    """Exponential backoff with jitter, for when the server gave no usable Retry-After:

        wait(n) = min(INITIAL * 2 ** (n - 1), MAX) + uniform(0, JITTER)     (RETRY_*_SECONDS constants)

    Built from `wait_exponential` and `wait_random`, which every tenacity 9.x has (the `multiplier`
    of `wait_exponential_jitter` is newer than the `tenacity>=9.0` the package allows).
    """
    return wait_exponential(multiplier=RETRY_INITIAL_DELAY_SECONDS, max=RETRY_MAX_DELAY_SECONDS) + wait_random(
        0, RETRY_JITTER_SECONDS
    )
