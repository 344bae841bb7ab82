"""anthropic's `beta.messages.tool_runner()` and `thread()` run the client's own loop, whose turns
go through kvwise (the cap, canonical order, one kvwise span per turn) on a wrapped client, while
the loop itself (tool calls, threading, the messages it yields) is the bare client's."""

from __future__ import annotations

import inspect
from typing import Any

import anthropic
import pytest
from anthropic import beta_async_tool, beta_tool
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

import sdk
from tests.sdk.canned_server import Canned, canned  # noqa: F401 (the fixture)

CAP = 55
MODEL = "claude-sonnet-4-6"
USER = [{"role": "user", "content": "What is the weather in Paris?"}]
TOOL_USE = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "model": MODEL,
    "stop_reason": "tool_use",
    "stop_sequence": None,
    "content": [{"type": "tool_use", "id": "tu_1", "name": "weather", "input": {"city": "Paris"}}],
    "usage": {"input_tokens": 5, "output_tokens": 3},
}


def weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


def alpha(x: str) -> str:
    """Sorts first."""
    return x


async def aweather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


async def aalpha(x: str) -> str:
    """Sorts first."""
    return x


def _tools(mode: str) -> list[Any]:
    if mode == "sync":
        return [beta_tool(weather), beta_tool(alpha)]
    return [beta_async_tool(aweather, name="weather"), beta_async_tool(aalpha, name="alpha")]


async def _run(client: Any, mode: str) -> list[Any]:
    runner = client.beta.messages.tool_runner(
        model=MODEL, max_tokens=1000, messages=USER, tools=_tools(mode), max_iterations=2
    )
    if mode == "sync":
        return list(runner)
    return [message async for message in runner]


def _turns(canned: Canned) -> list[dict[str, Any]]:
    turns = [seen.body for seen in canned.seen if seen.method == "POST"]
    canned.seen.clear()
    return turns


async def test_the_tool_runners_turns_go_through_kvwise_and_its_loop_is_the_bare_clients(canned, mode):
    canned.answer(TOOL_USE)
    cls = anthropic.Anthropic if mode == "sync" else anthropic.AsyncAnthropic
    bare = await _run(cls(base_url=canned.url, api_key="k", max_retries=0), mode)
    bare_turns = _turns(canned)
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    wrapped_client = sdk.wrap(
        cls(base_url=canned.url, api_key="k", max_retries=0),
        sdk.Policy(max_output_tokens=CAP),
        tracer_provider=provider,
    )
    ours = await _run(wrapped_client, mode)
    turns = _turns(canned)

    assert [message.model_dump() for message in ours] == [message.model_dump() for message in bare]
    assert len(turns) == len(bare_turns) == 2 and [turn.get("thread") for turn in turns] == [
        turn.get("thread") for turn in bare_turns
    ]
    assert [turn["max_tokens"] for turn in turns] == [CAP, CAP] and [turn["max_tokens"] for turn in bare_turns] == [
        1000,
        1000,
    ]
    assert [tool["name"] for tool in turns[0]["tools"]] == ["alpha", "weather"]
    assert (
        len(
            [
                span
                for span in spans.get_finished_spans()
                if span.kind is SpanKind.CLIENT and span.name.startswith("chat ")
            ]
        )
        == 2
    )
    for turn, bare_turn in zip(turns, bare_turns):  # nothing else rewritten
        assert {key: value for key, value in turn.items() if key not in ("max_tokens", "tools")} == {
            key: value for key, value in bare_turn.items() if key not in ("max_tokens", "tools")
        }


IN_THIS_THREAD = (  # the runner's own thread switch, where the installed release has one (anthropic 2.x)
    {"thread": False}
    if "thread" in inspect.signature(anthropic.resources.beta.messages.Messages.tool_runner).parameters
    else {}
)


@pytest.mark.parametrize("name", ["thread", "tool_runner"])
def test_the_thread_makers_are_bound_to_their_resource_with_the_bare_signature(name):
    client = anthropic.Anthropic(base_url="http://127.0.0.1:9", api_key="k")
    if not hasattr(client.beta.messages, name):
        pytest.skip(f"the installed anthropic has no beta.messages.{name}")
    wrapped = sdk.wrap(client)
    ours, bare = getattr(wrapped.beta.messages, name), getattr(client.beta.messages, name)
    assert ours.__self__ is wrapped.beta.messages and inspect.signature(ours) == inspect.signature(bare)


async def test_a_tools_list_the_caller_edits_in_place_reaches_each_turn_sorted_as_its_only_change(canned, mode):
    """The runner's params may hold the caller's own list, edited in place between turns: each turn
    sends that list as it is then (kvwise keeps no copy of it), sorted by name, kvwise's advertised
    rewrite, and as written where the policy leaves the order alone."""
    canned.answer(TOOL_USE)
    cls = anthropic.Anthropic if mode == "sync" else anthropic.AsyncAnthropic
    sent: dict[str, list[list[str]]] = {}
    for how, make in (
        ("bare", lambda client: client),
        ("wrapped", sdk.wrap),
        ("wrapped, canonicalize off", lambda client: sdk.wrap(client, sdk.Policy(canonicalize=False))),
    ):
        weather_tool = _tools(mode)[0]
        # the definitions as the API takes them (anthropic before 2.x sends a params list as it is given)
        tools: list[Any] = [
            weather_tool.to_dict(),
            {"type": "custom", "name": "zeta", "input_schema": {"type": "object"}},
        ]
        runner = make(cls(base_url=canned.url, api_key="k", max_retries=0)).beta.messages.tool_runner(
            model=MODEL, max_tokens=1000, messages=USER, tools=[weather_tool], max_iterations=3, **IN_THIS_THREAD
        )
        runner.set_messages_params(lambda params, _tools=tools: {**params, "tools": _tools})
        edits = iter(
            (
                lambda tools=tools: tools.append(
                    {"type": "custom", "name": "beta", "input_schema": {"type": "object"}}
                ),
                lambda tools=tools: tools.remove(tools[1]),
                lambda: None,
            )
        )
        if mode == "sync":
            for _ in runner:
                next(edits)()
        else:
            async for _ in runner:
                next(edits)()
        sent[how] = [[tool["name"] for tool in turn["tools"]] for turn in _turns(canned)]
    assert sent["bare"] == [["weather", "zeta"], ["weather", "zeta", "beta"], ["weather", "beta"]]
    assert sent["wrapped, canonicalize off"] == sent["bare"]
    assert sent["wrapped"] == [sorted(names) for names in sent["bare"]]
