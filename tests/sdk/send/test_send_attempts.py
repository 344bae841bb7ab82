"""`sdk.send.attempts`: a call is sent again only after a refusal of what kvwise added, the addition
taken back before the next send, at once, at most as often as allowed; an answer is never sent again,
and any other failure is raised itself after one send. Sync and async are one parametrised test."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from sdk.send.attempts import sending
from sdk.send.drive import arun, run


class Refused(Exception):
    """An error answer that refused something kvwise added."""


class Other(Exception):
    """Any other error, the client's retries already spent on it."""


class Resend:
    """A `Resend` that calls `Refused` a refusal and notes each taking back, in order, with the sends."""

    def __init__(self, log: list[str]) -> None:
        self.log = log

    def refused(self, error: BaseException) -> bool:
        return isinstance(error, Refused)

    def take_back(self, error: BaseException) -> None:
        self.log.append(f"take back {error}")


def _sends(outcomes: list[Any], log: list[str], asynchronous: bool) -> Callable[[], Any]:
    """A send that notes itself, then raises or returns each of `outcomes` in turn (a coroutine per call when async)."""
    pending = iter(outcomes)

    def next_outcome() -> Any:
        log.append("send")
        outcome = next(pending)
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    async def asend() -> Any:
        return next_outcome()

    return asend if asynchronous else next_outcome


def _call(outcomes: list[Any], asynchronous: bool, sends: int = 3) -> tuple[Any, list[str]]:
    """Run the sends; the result and what happened, in order."""
    log: list[str] = []
    steps = sending(_sends(outcomes, log, asynchronous), Resend(log), sends)
    return (asyncio.run(arun(steps)) if asynchronous else run(steps)), log


ASYNC = pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])


@ASYNC
def test_a_send_that_answers_is_never_sent_again(asynchronous: bool) -> None:
    assert _call(["answer", "never sent"], asynchronous) == ("answer", ["send"])


@ASYNC
def test_a_refusal_is_taken_back_before_the_call_is_sent_again(asynchronous: bool) -> None:
    result, log = _call([Refused("usage"), Refused("limit"), "answer"], asynchronous)
    assert (result, log) == ("answer", ["send", "take back usage", "send", "take back limit", "send"])


@ASYNC
def test_any_other_failure_is_raised_itself_after_one_send(asynchronous: bool) -> None:
    error = Other("429, the client's retries spent")
    with pytest.raises(Other) as raised:
        _call([error, "never sent"], asynchronous)
    assert raised.value is error


@ASYNC
def test_the_last_sends_own_refusal_is_raised_when_the_sends_run_out_and_is_not_taken_back(asynchronous: bool) -> None:
    last = Refused("third")
    log: list[str] = []
    with pytest.raises(Refused) as raised:
        steps = sending(_sends([Refused("first"), last, "never sent"], log, asynchronous), Resend(log), 2)
        asyncio.run(arun(steps)) if asynchronous else run(steps)
    assert raised.value is last and log == ["send", "take back first", "send"]


@ASYNC
def test_an_interrupt_is_never_a_sends_outcome_and_is_not_sent_again(asynchronous: bool) -> None:
    with pytest.raises(KeyboardInterrupt):
        _call([KeyboardInterrupt(), "never sent"], asynchronous)
