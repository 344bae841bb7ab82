"""A framework's own tool loop on the scripted simulator, bare against wrapped, read from the server.

The frameworks here do not all hand a caller each model call's usage, so the cached tokens a call
read are taken where they are decided: `ReadingSimulator` keeps, per model call, the cache-read
tokens it reported in that call's usage. `assert_tool_loop` then checks what issue 53 asks of each
route: one kvwise span per model call (recording the same cache reads), and from the second call on
at least the bare client's cached tokens.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Final

import sdk
from tests.frameworks.conformance import (
    Run,
    assert_cache_holds,
    assert_conforms,
    assert_no_new_headers,
    assert_one_span_per_call,
    assert_same_bodies,
)
from tests.frameworks.scripted import TOOL_ROUNDS, ScriptedSimulator, weather
from tests.simulator.cache import CacheUse

PINNED_ENV: Final = "KVWISE_PINNED_FRAMEWORKS"
"""Set by `make test-frameworks` in the venvs that hold these frameworks."""
MODEL: Final = "gpt-4o-mini"
"""A model name the frameworks know (LlamaIndex looks up its context window); the simulator serves any."""
ANTHROPIC_MODEL: Final = "claude-sonnet-4-5"
LOOP_LIMIT: Final = 8
"""Model calls a loop the test itself drives may take before it fails (the script ends in three)."""


class ReadingSimulator(ScriptedSimulator):
    """`ScriptedSimulator` that keeps the cache-read tokens each model call reported (`reads`)."""

    def __init__(self) -> None:
        super().__init__()
        self.reads: list[int] = []

    def _lookup(self, flavour: Any, job: Any) -> CacheUse:
        use = super()._lookup(flavour, job)
        self.reads.append(use.read)
        return use

    def reads_since(self, start: int) -> tuple[int, ...]:
        return tuple(self.reads[start:])


def get_weather(city: str) -> str:
    """Get the current weather in a city."""
    return weather(city)


def assert_tool_loop(bare: Run, wrapped: Run, *, id_first: bool = True) -> None:
    """The framework ran the scripted loop, the wrapped run conforms to the bare one (bodies up to
    kvwise's rewrites, one kvwise span per call) and reads at least the bare run's cached tokens.
    `id_first=False` for a framework that writes its own text before the caller's instructions (the
    ID then stands on a line of its own inside them): everything `assert_conforms` checks but that
    the ID opens them, the bodies compared with the ID's line taken out of both (kvwise moves it)."""
    assert len(bare.requests) == TOOL_ROUNDS + 1, len(bare.requests)
    if id_first:
        assert_conforms(bare, wrapped)
    else:
        assert len(wrapped.requests) == len(bare.requests) and wrapped.outcome.result == bare.outcome.result
        assert_same_bodies(_id_line_removed(bare), _id_line_removed(wrapped), sdk.Policy())
        assert_no_new_headers(bare, wrapped)
        assert_one_span_per_call(wrapped, len(bare.requests))
    assert_cache_holds(bare, wrapped)
    assert any(wrapped.outcome.cached[1:]), wrapped.outcome.cached  # the comparison is not of zeros alone


def _id_line_removed(run: Run) -> Run:
    line = f"{run.request_id}\n"

    def strip(value: Any) -> Any:
        if isinstance(value, str):
            return value.replace(line, "")
        if isinstance(value, list):
            return [strip(item) for item in value]
        if isinstance(value, dict):
            return {key: strip(item) for key, item in value.items()}
        return value

    return replace(run, requests=[replace(request, body=strip(request.body)) for request in run.requests])
