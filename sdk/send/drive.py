"""Steps written once, run by a sync or an async driver.

A step function is a generator that does no I/O itself: where it needs some (a wait for a
fan-out leader, the sends), it yields an `Io` naming the sync
and the async way of doing it, and gets the result back from its `yield`, or the exception raised
there. `run` does the sync ways, `arun` awaits the async ones; nothing else tells a sync client's
send from an async one's (tenacity's `BaseRetrying.iter` under `Retrying` and `AsyncRetrying` is
the same split).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator
from typing import Any, NamedTuple, TypeVar

T = TypeVar("T")


class Io(NamedTuple):
    """One piece of I/O a step needs: `sync(*args)` with a sync client, `await async_(*args)` with an async one.

    A tuple, not a frozen dataclass: one is made per attempt, and a frozen dataclass's `__init__`
    sets each field through `object.__setattr__`."""

    sync: Callable[..., Any]
    async_: Callable[..., Awaitable[Any]]
    args: tuple[Any, ...] = ()


Steps = Generator[Io, Any, T]
"""A step function's generator: it yields the I/O it needs and returns its result."""


class _Stepper:
    """Where a run of steps stands: the I/O it waits for, None once it returned `value`."""

    __slots__ = ("io", "steps", "value")

    def __init__(self, steps: Steps[Any]) -> None:
        self.steps = steps
        self.io: Io | None = None
        self.value: Any = None
        self.resume(None, None)

    def resume(self, value: Any, error: BaseException | None) -> None:
        """Hand the steps what their I/O gave, or raise in them what it raised."""
        try:
            self.io = self.steps.send(value) if error is None else self.steps.throw(error)
        except StopIteration as done:
            self.io, self.value = None, done.value


def _outcome(io: Io) -> tuple[Any, BaseException | None]:
    try:
        return io.sync(*io.args), None
    except BaseException as error:  # a cancellation or an interrupt too: the steps end their call with it
        return None, error


def run(steps: Steps[T]) -> T:
    """The result of `steps`, their I/O done the sync way."""
    stepper = _Stepper(steps)
    while stepper.io is not None:
        stepper.resume(*_outcome(stepper.io))
    return stepper.value  # type: ignore[no-any-return]


async def arun(steps: Steps[T]) -> T:
    """The result of `steps`, their I/O awaited."""
    stepper = _Stepper(steps)
    while (io := stepper.io) is not None:
        try:
            value = await io.async_(*io.args)
        except BaseException as error:  # as in `_outcome`
            stepper.resume(None, error)
        else:
            stepper.resume(value, None)
    return stepper.value  # type: ignore[no-any-return]
