"""Retries with tenacity: exponential backoff with jitter, honouring Retry-After.

What is sent again is what the bare client's own retry loop sends again, decided by its own rules
(`sdk.compat.client_would_retry`): a failure before any answer (a refused or dropped connection, a
timeout, a body cut short in transfer), and an error answer its `_should_retry` accepts
(`x-should-retry`, 408, 409, 429, 5xx). Never a 200 whose body is not JSON, and never a stream once
its 200 arrived (`sdk.send.stream_watch`): the provider accepted that request and may bill every copy. Each
attempt carries its number in `x-stainless-retry-count`, as the clients' own retries do (see
`sdk.send.sender`). The wrapped client's own retries are turned off so attempts never multiply; when the
attempts run out the caller gets the client's own exception.

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
import logging
import math
import sys
import time
from collections.abc import Callable, Mapping
from functools import cache
from typing import Any

from tenacity import (
    AsyncRetrying,
    RetryCallState,
    Retrying,
    before_sleep_log,
    retry_if_exception,
    stop_after_attempt,
    wait_exponential,
    wait_random,
)
from tenacity.wait import wait_base

from sdk._constants import (
    RETRY_AFTER_CAP_SECONDS,
    RETRY_INITIAL_DELAY_SECONDS,
    RETRY_JITTER_SECONDS,
    RETRY_MAX_DELAY_SECONDS,
)
from sdk.compat import client_would_retry

log = logging.getLogger("sdk")

CLIENT_MODULES = ("openai", "anthropic")


def _error_classes() -> tuple[tuple[type[BaseException], ...], tuple[type[BaseException], ...]]:
    """(connection errors, status errors) of the clients this process has imported.

    Only imported ones: a client that was never imported made no call, and importing anthropic for
    an openai app would cost it seconds and memory. Looked up once per set of loaded clients."""
    return _error_classes_of(tuple(name for name in CLIENT_MODULES if name in sys.modules))


@cache
def _error_classes_of(modules: tuple[str, ...]) -> tuple[tuple[type[BaseException], ...], tuple[type[BaseException], ...]]:
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


class Attempts:
    """The attempts of one call: `retries + 1` in all, its first send and the retries;
    `retryable(error)` says whether a failed one is worth another (`is_retryable` for the wrapped
    client), and `on_attempt` hears the call's running count (1, 2, ...)."""

    def __init__(self, retries: int, on_attempt: Callable[[int], None], retryable: Callable[[BaseException], bool]) -> None:
        self.limit = retries + 1
        self.made = 0
        self._on_attempt = on_attempt
        self.retryable = retryable

    @property
    def left(self) -> int:
        return self.limit - self.made

    def start(self) -> None:
        """An attempt is about to be sent."""
        self.made += 1
        self._on_attempt(self.made)


def backoff() -> wait_base:
    """Exponential backoff with jitter, for when the server gave no usable Retry-After:

        wait(n) = min(INITIAL * 2 ** (n - 1), MAX) + uniform(0, JITTER)     (RETRY_*_SECONDS constants)

    Built from `wait_exponential` and `wait_random`, which every tenacity 9.x has (the `multiplier`
    of `wait_exponential_jitter` is newer than the `tenacity>=9.0` the package allows).
    """
    return wait_exponential(multiplier=RETRY_INITIAL_DELAY_SECONDS, max=RETRY_MAX_DELAY_SECONDS) + wait_random(
        0, RETRY_JITTER_SECONDS
    )


_WAIT = wait_retry_after(backoff())
_BEFORE_SLEEP = before_sleep_log(log, logging.INFO)
"""Tenacity's strategies hold no state: built once, shared by every call."""


def _start_retry(state: RetryCallState, attempts: Attempts) -> None:
    """Tenacity's `before` hook: count each retry (its attempt 1 is the replayed failure)."""
    if state.attempt_number > 1:
        attempts.start()


def retry_kwargs(attempts: Attempts, sleep: Callable[[float], Any] | None) -> dict[str, Any]:
    """Keyword arguments for `Retrying`/`AsyncRetrying` taking over after a failed first attempt.

    Tenacity's attempt 1 is that failure replayed (already counted in `attempts`); never
    tenacity's forever-and-wrap defaults.
    """
    kwargs: dict[str, Any] = dict(
        stop=stop_after_attempt(attempts.left + 1),
        retry=retry_if_exception(attempts.retryable),
        wait=_WAIT,
        reraise=True,
        before=lambda state: _start_retry(state, attempts),
        before_sleep=_BEFORE_SLEEP,
    )
    if sleep is not None:
        kwargs["sleep"] = sleep
    return kwargs


def _worth_retrying(error: BaseException, attempts: Attempts) -> bool:
    return attempts.left > 0 and attempts.retryable(error)


def _replay(failure: BaseException, send: Callable[[], Any]) -> Callable[[], Any]:
    """A send whose first call raises `failure` again (the attempt already made), then sends for real."""
    pending = [failure]

    def attempt() -> Any:
        if pending:
            raise pending.pop()
        return send()

    return attempt


def call_with_retries(send: Callable[[], Any], attempts: Attempts, sleep: Callable[[float], Any] | None = None) -> Any:
    """Run `send()` with what is left of `attempts` (sync).

    The first attempt runs bare: tenacity's per-call state costs more than the rest of the SDK's
    work on a call, and most calls succeed at once. A retryable failure is replayed to tenacity as
    its attempt 1, so its wait (Retry-After, backoff), stop and log see the same history.
    """
    attempts.start()
    try:
        return send()
    except Exception as error:
        if not _worth_retrying(error, attempts):
            raise
        failure = error
    return Retrying(**retry_kwargs(attempts, sleep))(_replay(failure, send))


async def acall_with_retries(send: Callable[[], Any], attempts: Attempts, sleep: Callable[[float], Any] | None = None) -> Any:
    """Run `await send()` with what is left of `attempts` (async); the first attempt runs bare, as above."""
    attempts.start()
    try:
        return await send()
    except Exception as error:
        if not _worth_retrying(error, attempts):
            raise
        failure = error
    replay = _replay(failure, send)

    async def attempt() -> Any:  # tenacity awaits only what a coroutine function returns
        return await replay()

    return await AsyncRetrying(**retry_kwargs(attempts, sleep))(attempt)
