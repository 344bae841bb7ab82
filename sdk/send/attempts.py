"""The sends of one call: the one decision kvwise's tenacity loop makes.

Every send is one `post` of the wrapped client, inside which the client's own retries run as they do
bare (`sdk.send.retry`). What the client cannot decide is whether the error it raised in the end
refused something kvwise added to the request (`sdk.send.refusals`): then the call is sent once more,
as the caller wrote it. Tenacity decides (`strategies`): sent again only after such a refusal (its
retry predicate), the addition taken back before the next send (its `before_sleep`), at once (a
refusal is no fault to back off from), at most once per addition (`stop`), and the last send's own
exception at the end: never tenacity's forever-and-wrap defaults. A send that answered is never
repeated: the retry predicate reads exceptions only.

The machine is built when the first send fails: the call that answers at once, nearly every call,
pays for no machine (tenacity's `Retrying`, its thread-local state and its outcome's `Future` cost a
sixth of kvwise's instructions per call, `bench_sdk_instructions`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Protocol

from tenacity import (
    DoAttempt,
    DoSleep,
    RetryCallState,
    Retrying,
    before_sleep_log,
    retry_if_exception,
    stop_after_attempt,
    wait_none,
)

from sdk.send.drive import Io, Steps

log = logging.getLogger("sdk")

_LOG = before_sleep_log(log, logging.INFO)
_NO_WAIT = wait_none()
"""Tenacity's strategies that hold no state: built once, shared by every call."""


class Resend(Protocol):
    """What decides a call's next send: whether an error refused an addition of kvwise's, and its taking back."""

    def refused(self, error: BaseException) -> bool:
        """Whether `error` refused something kvwise added to the request (the call is then sent again)."""
        ...

    def take_back(self, error: BaseException) -> None:
        """Make the next send carry what `error` refused as the caller wrote it."""
        ...


def strategies(resend: Resend, sends: int) -> dict[str, Any]:
    """Keyword arguments for tenacity's `Retrying`: at most `sends` sends, the next only after a
    refusal `resend` takes back, at once, and the caller's exception itself at the end."""

    def take_back(state: RetryCallState) -> None:
        outcome = state.outcome
        if outcome is not None and (error := outcome.exception()) is not None:
            resend.take_back(error)
        _LOG(state)

    return dict(
        stop=stop_after_attempt(sends),
        retry=retry_if_exception(resend.refused),
        wait=_NO_WAIT,
        reraise=True,
        before_sleep=take_back,
    )


def sending(send: Callable[[], Any], resend: Resend, sends: int) -> Steps[Any]:
    """The sends of one call, without I/O: after a failed one, tenacity's state machine decides, as its
    own `Retrying.__iter__` has it decide; each send (`send()`) is yielded to the driver. The result is
    the answering send's; the exception, the last send's own."""
    try:
        return (yield Io(send, send))  # an async client's `send()` is its coroutine
    except Exception as error:  # a cancellation or an interrupt is no send's outcome: it goes on up
        first = error
    retrying = Retrying(**strategies(resend, sends))
    retrying.begin()
    state = RetryCallState(retrying, fn=send, args=(), kwargs={})
    state.set_exception((type(first), first, first.__traceback__))
    try:
        while True:
            do = retrying.iter(state)
            if isinstance(do, DoAttempt):
                try:
                    state.set_result((yield Io(send, send)))
                except Exception as error:  # as above
                    state.set_exception((type(error), error, error.__traceback__))
            elif isinstance(do, DoSleep):
                state.prepare_for_next_attempt()  # no wait: the next send goes at once
            else:
                return do
    finally:
        retrying.iter_state.reset()  # its pending actions hold `retrying`: no cycle is left for the collector
