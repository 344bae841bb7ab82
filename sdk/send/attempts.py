"""The attempts of one send: every one, the first too, inside tenacity.

One set of strategies (`strategies`) decides what follows a failed attempt: whether it is sent again
(the wrapped client's own rules, `sdk.send.retry.is_retryable`), when to stop (the caller's
`max_retries`, `sdk.send.retry.retries_for`), how long to wait (Retry-After, else backoff:
`sdk.send.retry.wait_retry_after`). Tenacity's state machine (`BaseRetrying.iter`) applies them in
`attempting`, steps that do no I/O, the way tenacity's own `Retrying.__iter__` does; each attempt
is counted as it starts (its `x-stainless-retry-count`, the span's `kvwise.attempts`). The sync and
the async driver (`sdk.send.drive`) do the sends and the waits: `call_with_retries` and
`acall_with_retries`.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any, cast

from tenacity import (
    AsyncRetrying,
    DoAttempt,
    DoSleep,
    RetryCallState,
    Retrying,
    before_sleep_log,
    retry_if_exception,
    stop_after_attempt,
)
from tenacity.nap import sleep as _SLEEP

from sdk.send.drive import Io, Steps, arun, run
from sdk.send.retry import backoff, wait_retry_after

log = logging.getLogger("sdk")

_WAIT = wait_retry_after(backoff())
_BEFORE_SLEEP = before_sleep_log(log, logging.INFO)
"""Tenacity's strategies hold no state: built once, shared by every call."""
_ASYNC_SLEEP = cast("Callable[[float], Awaitable[None]]", AsyncRetrying().sleep)
"""Tenacity's own async sleep: trio's under trio, else asyncio's."""


class Attempts:
    """The attempts of one call: `retries + 1` in all, its first send and the retries;
    `retryable(error)` says whether a failed one is worth another (`is_retryable` for the wrapped
    client), and `on_attempt` hears the call's running count (1, 2, ...)."""

    def __init__(
        self, retries: int, on_attempt: Callable[[int], None], retryable: Callable[[BaseException], bool]
    ) -> None:
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


def strategies(attempts: Attempts) -> dict[str, Any]:
    """Keyword arguments for tenacity's `Retrying`: what is left of `attempts` (at least one, so a
    request sent again as the caller wrote it, `sdk.send.refusals`, is sent), the client's retry rules,
    Retry-After or backoff, and the caller's exception itself at the end: never tenacity's
    forever-and-wrap defaults."""
    return dict(
        stop=stop_after_attempt(max(attempts.left, 1)),
        retry=retry_if_exception(attempts.retryable),
        wait=_WAIT,
        reraise=True,
        before_sleep=_BEFORE_SLEEP,
    )


def attempting(send: Callable[[], Any], attempts: Attempts, sleep: Callable[[float], Any] | None) -> Steps[Any]:
    """Every attempt of one send, without I/O: tenacity's state machine decides after each, as its
    own `Retrying.__iter__` has it decide; each attempt (`send()`, counted as it starts) and each
    wait is yielded to the driver. The result is the answering attempt's; the exception, the last
    attempt's own."""
    retrying = Retrying(**strategies(attempts))
    retrying.begin()
    state = RetryCallState(retrying, fn=send, args=(), kwargs={})
    try:
        while True:
            do = retrying.iter(state)
            if isinstance(do, DoAttempt):
                attempts.start()
                try:
                    state.set_result((yield Io(send, send)))  # an async client's `send()` is its coroutine
                except Exception as error:  # a cancellation or an interrupt is no attempt's outcome: it goes on up
                    state.set_exception((type(error), error, error.__traceback__))
            elif isinstance(do, DoSleep):
                state.prepare_for_next_attempt()
                yield Io(sleep or _SLEEP, sleep or _ASYNC_SLEEP, (float(do),))
            else:
                return do
    finally:
        retrying.iter_state.reset()  # its pending actions hold `retrying`: no cycle is left for the collector


def call_with_retries(send: Callable[[], Any], attempts: Attempts, sleep: Callable[[float], Any] | None = None) -> Any:
    """`send()` under `attempts`, with a sync client (`sleep` replaces `time.sleep`: tests record the waits)."""
    return run(attempting(send, attempts, sleep))


async def acall_with_retries(
    send: Callable[[], Awaitable[Any]], attempts: Attempts, sleep: Callable[[float], Awaitable[Any]] | None = None
) -> Any:
    """`await send()` under `attempts`, with an async client."""
    return await arun(attempting(send, attempts, sleep))
