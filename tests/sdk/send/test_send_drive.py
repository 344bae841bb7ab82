"""`sdk.send.drive`: one step function, run by the sync and by the async driver, gets each I/O's
result, or its exception raised where it yielded, and returns its result."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from sdk.send.drive import Io, Steps, arun, run


def _double(value: int) -> int:
    return value * 2


async def _adouble(value: int) -> int:
    return value * 2


def _refuse() -> None:
    raise ValueError("refused")


async def _arefuse() -> None:
    raise ValueError("refused")


def _steps(seen: list[Any]) -> Steps[str]:
    seen.append((yield Io(_double, _adouble, (21,))))
    try:
        yield Io(_refuse, _arefuse)
    except ValueError as error:
        seen.append(str(error))
    return "done"


def _failing_steps() -> Steps[None]:
    yield Io(_refuse, _arefuse)


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_a_step_function_gets_each_result_and_exception_from_either_driver(asynchronous: bool) -> None:
    seen: list[Any] = []
    result = asyncio.run(arun(_steps(seen))) if asynchronous else run(_steps(seen))
    assert result == "done"
    assert seen == [42, "refused"]


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_an_exception_the_steps_do_not_catch_reaches_the_caller(asynchronous: bool) -> None:
    with pytest.raises(ValueError, match="refused"):
        asyncio.run(arun(_failing_steps())) if asynchronous else run(_failing_steps())
