"""The attempts of one send, in one loop whose every decision is tenacity's.

One set of strategies (`strategies`) decides what follows a failed attempt: whether it is sent again
(the wrapped client's own rules, `sdk.send.retry.is_retryable`), when to stop (the caller's
`max_retries`, `sdk.send.retry.retries_for`), how long to wait (Retry-After, else backoff:
`sdk.send.retry.wait_retry_after`). Tenacity's state machine (`BaseRetrying.iter`) applies them in
`attempting`, steps that do no I/O, the way tenacity's own `Retrying.__iter__` does; each attempt
is counted as it starts (its `x-stainless-retry-count`, the span's `kvwise.attempts`). The sync and
the async driver (`sdk.send.drive`) do the sends and the waits.

An answer needs no decision (the retry strategy reads exceptions only), so the machine is built
when the first attempt fails, with that attempt as its first outcome: the call that answers at
once, nearly every call, pays for no machine (tenacity's `Retrying`, its thread-local state and
its outcome's `Future` cost a sixth of kvwise's instructions per call, `bench_sdk_instructions`).
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

from sdk.send.drive import Io, Steps
from sdk.send.retry import backoff, wait_retry_after

log = logging.getLogger("sdk")

_WAIT = wait_retry_after(backoff())
_BEFORE_SLEEP = before_sleep_log(log, logging.INFO)
"""Tenacity's strategies hold no state: built once, shared by every call."""
_ASYNC_SLEEP = cast("Callable[[float], Awaitable[None]]", AsyncRetrying().sleep)
"""Tenacity's own async sleep: trio's under trio, else asyncio's."""


Sleeps = tuple[Callable[[float], Any], Callable[[float], Awaitable[Any]]]
"""A sync and an async sleep, in tenacity's place."""


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


def strategies(attempts: Attempts, left: int) -> dict[str, Any]:
    """Keyword arguments for tenacity's `Retrying`: the `left` attempts of `attempts` (at least one,
    so a request sent again as the caller wrote it, `sdk.send.refusals`, is sent), the client's retry
    rules, Retry-After or backoff, and the caller's exception itself at the end: never tenacity's
    forever-and-wrap defaults."""
    return dict(
        stop=stop_after_attempt(max(left, 1)),
        retry=retry_if_exception(attempts.retryable),
        wait=_WAIT,
        reraise=True,
        before_sleep=_BEFORE_SLEEP,
    )


def attempting(send: Callable[[], Any], attempts: Attempts, sleep: Sleeps | None = None) -> Steps[Any]:
    """Every attempt of one send, without I/O: after a failed one, tenacity's state machine decides,
    as its own `Retrying.__iter__` has it decide; each attempt (`send()`, counted as it starts) and
    each wait is yielded to the driver (`sleep` replaces tenacity's sleeps: tests record the waits).
    The result is the answering attempt's; the exception, the last attempt's own."""
    left = attempts.left
    attempts.start()
    try:
        return (yield Io(send, send))  # an async client's `send()` is its coroutine
    except Exception as error:  # a cancellation or an interrupt is no attempt's outcome: it goes on up
        first = error
    retrying = Retrying(**strategies(attempts, left))
    retrying.begin()
    state = RetryCallState(retrying, fn=send, args=(), kwargs={})
    state.set_exception((type(first), first, first.__traceback__))
    try:
        while True:
            do = retrying.iter(state)
            if isinstance(do, DoAttempt):
                attempts.start()
                try:
                    state.set_result((yield Io(send, send)))
                except Exception as error:  # as above
                    state.set_exception((type(error), error, error.__traceback__))
            elif isinstance(do, DoSleep):
                state.prepare_for_next_attempt()
                sync_sleep, async_sleep = sleep or (_SLEEP, _ASYNC_SLEEP)
                yield Io(sync_sleep, async_sleep, (float(do),))
            else:
                return do
    finally:
        retrying.iter_state.reset()  # its pending actions hold `retrying`: no cycle is left for the collector
