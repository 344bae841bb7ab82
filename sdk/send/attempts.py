"""The attempts of one send: every one, the first too, inside tenacity.

One set of strategies decides, without I/O, what happens after each attempt (`strategies`): whether
a failed one is sent again (`Attempts.worth_retrying`: the wrapped client's own rules,
`sdk.retry.is_retryable`), when to stop (the caller's `max_retries`, `sdk.retry.retries_for`), how
long to wait (Retry-After, else backoff: `sdk.retry.wait_retry_after`), and it counts each attempt
as it starts (its `x-stainless-retry-count` and the span's `kvwise.attempts`). Tenacity's one state
machine (`BaseRetrying.iter`) runs them under its two drivers, `Retrying` and `AsyncRetrying`;
`call_with_retries` and `acall_with_retries` add nothing but the send.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from tenacity import AsyncRetrying, RetryCallState, Retrying, before_sleep_log, retry_if_exception, stop_after_attempt

from sdk.retry import backoff, wait_retry_after

log = logging.getLogger("sdk")

_WAIT = wait_retry_after(backoff())
_BEFORE_SLEEP = before_sleep_log(log, logging.INFO)
"""Tenacity's strategies hold no state: built once, shared by every call."""


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

    def start(self, state: RetryCallState | None = None) -> None:
        """An attempt is about to be sent (tenacity's `before` hook)."""
        self.made += 1
        self._on_attempt(self.made)

    def worth_retrying(self, error: BaseException) -> bool:
        """Whether a failed attempt is sent again: an `Exception` the client's own rules retry (a
        cancellation or an interrupt never is)."""
        return isinstance(error, Exception) and self.retryable(error)


def strategies(attempts: Attempts, sleep: Callable[[float], Any] | None) -> dict[str, Any]:
    """Keyword arguments for `Retrying`/`AsyncRetrying`: what is left of `attempts` (at least one,
    so a request sent again as the caller wrote it, `sdk.refusals`, is sent), the client's retry
    rules, Retry-After or backoff, and the caller's exception itself at the end: never tenacity's
    forever-and-wrap defaults. `sleep` replaces tenacity's (tests record the waits instead)."""
    kwargs: dict[str, Any] = dict(
        stop=stop_after_attempt(max(attempts.left, 1)),
        retry=retry_if_exception(attempts.worth_retrying),
        wait=_WAIT,
        reraise=True,
        before=attempts.start,
        before_sleep=_BEFORE_SLEEP,
    )
    if sleep is not None:
        kwargs["sleep"] = sleep
    return kwargs


def call_with_retries(send: Callable[[], Any], attempts: Attempts, sleep: Callable[[float], Any] | None = None) -> Any:
    """`send()` under `attempts`, with a sync client."""
    return Retrying(**strategies(attempts, sleep))(send)


async def acall_with_retries(
    send: Callable[[], Awaitable[Any]], attempts: Attempts, sleep: Callable[[float], Any] | None = None
) -> Any:
    """`await send()` under `attempts`, with an async client (whose `post` returns a coroutine)."""

    async def attempt() -> Any:  # tenacity awaits only what a coroutine function returns
        return await send()

    return await AsyncRetrying(**strategies(attempts, sleep))(attempt)
