"""`sdk.send.attempts`: every attempt runs in one loop, each decision after a failure tenacity's
under the client's rules; sync and async are one parametrised test."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from sdk.send.attempts import Attempts, attempting
from sdk.send.drive import arun, run


class Retryable(Exception):
    """An error the client's rules would send again after."""


class Final(Exception):
    """An error they would not."""


def _attempts(retries: int, counted: list[int]) -> Attempts:
    return Attempts(retries, counted.append, lambda error: isinstance(error, Retryable))


def _sends(outcomes: list[Any], asynchronous: bool) -> Callable[[], Any]:
    """A send that raises or returns each of `outcomes` in turn (a coroutine per call when async)."""
    pending = iter(outcomes)

    def next_outcome() -> Any:
        outcome = next(pending)
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    async def asend() -> Any:
        return next_outcome()

    return asend if asynchronous else next_outcome


def _call(
    outcomes: list[Any], retries: int, asynchronous: bool, counted: list[int] | None = None
) -> tuple[Any, list[int], list[float]]:
    """Run the sends under `retries`, recording the waits instead of sleeping; the result, the
    attempts counted (into `counted` when given) and the waits."""
    counted = [] if counted is None else counted
    waits: list[float] = []
    send, attempts = _sends(outcomes, asynchronous), _attempts(retries, counted)

    async def asleep(seconds: float) -> None:
        waits.append(seconds)

    steps = attempting(send, attempts, (waits.append, asleep))
    return (asyncio.run(arun(steps)) if asynchronous else run(steps)), counted, waits


ASYNC = pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])


@ASYNC
def test_a_first_attempt_that_answers_is_counted_once_and_never_waits(asynchronous: bool) -> None:
    assert _call(["answer"], 2, asynchronous) == ("answer", [1], [])


@ASYNC
def test_a_retryable_first_failure_is_sent_again_after_a_backoff_wait(asynchronous: bool) -> None:
    result, counted, waits = _call([Retryable(), "answer"], 2, asynchronous)
    assert (result, counted) == ("answer", [1, 2])
    assert len(waits) == 1 and waits[0] > 0


@ASYNC
def test_a_failure_the_rules_refuse_is_raised_itself_after_one_attempt(asynchronous: bool) -> None:
    error = Final("no")
    with pytest.raises(Final) as raised:
        _call([error, "never sent"], 2, asynchronous)
    assert raised.value is error


@ASYNC
def test_the_last_attempts_own_error_is_raised_when_the_retries_run_out(asynchronous: bool) -> None:
    last = Retryable("third")
    counted: list[int] = []
    with pytest.raises(Retryable) as raised:
        _call([Retryable(), Retryable(), last], 2, asynchronous, counted)
    assert raised.value is last
    assert counted == [1, 2, 3]


@ASYNC
def test_an_interrupt_is_never_an_attempts_outcome_and_is_not_sent_again(asynchronous: bool) -> None:
    with pytest.raises(KeyboardInterrupt):
        _call([KeyboardInterrupt(), "never sent"], 2, asynchronous)
