"""Cache hints: Anthropic breakpoints within the limit of four, OpenAI cache keys and explicit marks."""

from __future__ import annotations

import json

import pytest

import sdk
from sdk.adapters import adapter_for
from sdk.cache.hints import count_breakpoints, place_cache_hints
from sdk.call import Api, Provider
from sdk.providers.anthropic import min_cacheable_tokens as anthropic_min_tokens
from tests.sdk.helpers import LONG_SYSTEM, resolve

TOOLS = [
    {"name": name, "description": "Look things up. " * 200, "input_schema": {"type": "object", "properties": {}}}
    for name in ("a_tool", "b_tool")
]
HISTORY = [
    {"role": "user", "content": "First question " * 300},
    {"role": "assistant", "content": "First answer " * 300},
    {"role": "user", "content": "Next?"},
]


async def test_anthropic_breakpoints_mark_tools_system_history_and_the_last_turn_and_the_cache_is_read_back(
    simulator, anthropic_client
):
    wrapped = sdk.wrap(anthropic_client)
    usages = []
    for _ in range(2):
        message = await resolve(
            wrapped.messages.create(
                model="claude-sonnet-5", system=LONG_SYSTEM, tools=TOOLS, messages=HISTORY, max_tokens=32
            )
        )
        usages.append(message.usage)
    body = simulator.requests[-1].body
    assert "cache_control" in body["tools"][-1]
    assert "cache_control" in body["system"][-1]
    assert "cache_control" in body["messages"][1]["content"][-1]
    assert "cache_control" in body["messages"][2]["content"][-1]  # tools offered: the conversation will grow
    assert count_breakpoints(body, "cache_control") == 4
    assert usages[0].cache_creation_input_tokens > 0 and usages[0].cache_read_input_tokens == 0
    assert usages[1].cache_read_input_tokens >= 1024


async def test_a_callers_four_breakpoints_are_left_alone_and_no_fifth_is_added(simulator, anthropic_client):
    marked = {"type": "ephemeral"}
    system = [{"type": "text", "text": LONG_SYSTEM, "cache_control": marked}]
    tools = [{**TOOLS[0], "cache_control": marked}, TOOLS[1]]
    history = [
        {"role": "user", "content": [{"type": "text", "text": "First question " * 300, "cache_control": marked}]},
        {"role": "assistant", "content": [{"type": "text", "text": "First answer " * 300, "cache_control": marked}]},
        {"role": "user", "content": "Next?"},
    ]
    wrapped = sdk.wrap(anthropic_client)
    await resolve(
        wrapped.messages.create(model="claude-sonnet-5", system=system, tools=tools, messages=history, max_tokens=32)
    )
    body = simulator.requests[-1].body
    assert count_breakpoints(body, "cache_control") == 4
    assert body["system"] == system and body["messages"][:2] == history[:2]


async def test_no_breakpoint_is_placed_below_the_models_minimum_length(simulator, anthropic_client):
    wrapped = sdk.wrap(anthropic_client)
    await resolve(
        wrapped.messages.create(
            model="claude-haiku-4-5", system="Be brief.", messages=[{"role": "user", "content": "hi"}]
        )
    )
    assert count_breakpoints(simulator.requests[-1].body, "cache_control") == 0


async def test_other_openai_compatible_servers_get_no_cache_key(simulator, openai_client):
    await resolve(
        sdk.wrap(openai_client).chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
    )
    assert "prompt_cache_key" not in simulator.requests[-1].body


def test_an_unknown_provider_is_refused(openai_client):
    with pytest.raises(ValueError, match="provider"):
        sdk.wrap(openai_client, provider="palm")


async def test_cache_ttl_from_the_policy_is_on_every_placed_breakpoint(simulator, anthropic_client):
    wrapped = sdk.wrap(anthropic_client, sdk.Policy(cache_ttl="1h"))
    await resolve(
        wrapped.messages.create(
            model="claude-sonnet-5", system=LONG_SYSTEM, messages=[{"role": "user", "content": "hi"}]
        )
    )
    assert simulator.requests[-1].body["system"][-1]["cache_control"] == {"type": "ephemeral", "ttl": "1h"}


async def test_openai_prompt_cache_key_comes_from_the_stable_prefix_unless_the_caller_set_one(simulator, openai_client):
    wrapped = sdk.wrap(openai_client, provider="openai")
    for question in ("one", "two"):
        await resolve(
            wrapped.chat.completions.create(
                model="m", messages=[{"role": "system", "content": LONG_SYSTEM}, {"role": "user", "content": question}]
            )
        )
    keys = [request.body["prompt_cache_key"] for request in simulator.requests]
    assert keys[0] == keys[1] and keys[0].startswith("kvwise-")
    await resolve(
        wrapped.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}], prompt_cache_key="mine")
    )
    assert simulator.requests[-1].body["prompt_cache_key"] == "mine"


def test_openai_explicit_breakpoints_only_for_models_that_take_them():
    adapter = adapter_for(Api.CHAT)
    for model, expected in (("gpt-5.6", 2), ("gpt-5.4", 0), ("llama-3", 0)):
        call = adapter.to_call(
            {"model": model, "messages": [{"role": "system", "content": LONG_SYSTEM}, *HISTORY]}, Provider.OPENAI
        )
        place_cache_hints(call, sdk.Policy(), adapter)
        assert count_breakpoints(adapter.to_kwargs(call), "prompt_cache_breakpoint") == expected, model


@pytest.mark.parametrize(
    ("model", "tokens"),
    [
        ("claude-sonnet-5", 1024),
        ("claude-haiku-4-5-20251001", 4096),
        ("claude-opus-4-5", 4096),
        ("claude-sonnet-4-6", 2048),
        ("claude-opus-5", 512),
    ],
)
def test_minimum_cacheable_length_by_model_family(model, tokens):
    assert anthropic_min_tokens(model) == tokens


def test_unknown_content_shapes_pass_through_byte_for_byte():
    adapter = adapter_for(Api.MESSAGES)
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}
    tool_result = {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "42"}]}
    audio = {"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}}
    messages = [
        {"role": "user", "content": [image, audio]},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "calc", "input": {}}]},
        {"role": "user", "content": [tool_result]},
    ]
    kwargs = {"model": "claude-sonnet-5", "messages": messages, "max_tokens": 10}
    call = adapter.to_call(json.loads(json.dumps(kwargs)), Provider.ANTHROPIC)
    from sdk.pipeline import Pipeline

    Pipeline(sdk.Policy()).prepare(call)
    out = adapter.to_kwargs(call)
    assert json.dumps(out["messages"]) == json.dumps(messages)


@pytest.mark.parametrize(
    ("value", "marks"),
    [
        ({"cache_control": {"type": "ephemeral"}, "messages": []}, 1),
        ({"cache_control": None, "system": [{"type": "text", "text": "x", "cache_control": {"type": "ephemeral"}}]}, 1),
        ({"input_schema": {"type": "object", "properties": {"cache_control": {"type": "object"}}}}, 0),
        ({"extra_body": {"cache_control": {"type": "ephemeral"}}, "tools": ({"name": "t", "cache_control": {}},)}, 2),
    ],
    ids=["top_level", "explicit_none_is_no_mark", "schema_property_named_like_a_mark", "extra_body_and_tuple"],
)
def test_breakpoints_are_counted_wherever_the_caller_put_them_and_nowhere_else(value, marks):
    assert count_breakpoints(value, "cache_control") == marks


def _hinted(api: Api, kwargs: dict) -> dict:
    adapter = adapter_for(api)
    call = adapter.to_call(json.loads(json.dumps(kwargs)), Provider.OPENAI)
    place_cache_hints(call, sdk.Policy(), adapter)
    return adapter.to_kwargs(call)


def test_openai_explicit_marks_go_on_text_parts_only():
    image = {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}
    history = [HISTORY[0], {"role": "user", "content": [{"type": "text", "text": "This one:"}, image]}, HISTORY[2]]
    out = _hinted(Api.CHAT, {"model": "gpt-5.6", "messages": history})
    marked = {"type": "text", "text": "This one:", "prompt_cache_breakpoint": {"mode": "explicit"}}
    assert out["messages"][1]["content"] == [marked, image]
    call_item = {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"}
    items = [{"role": "user", "content": "First question " * 300}, call_item, {"role": "user", "content": "Next?"}]
    out = _hinted(Api.RESPONSES, {"model": "gpt-5.6", "input": items})
    assert out["input"][1] == call_item


def test_the_last_turn_mark_of_a_growing_anthropic_conversation_sits_on_its_last_block_the_note_that_ends_the_first_turn_or_not():  # noqa: E501 (the name states the claim it tests)
    from sdk.prompt.canonical import canonicalize
    from sdk.prompt.moving import is_note

    adapter = adapter_for(Api.MESSAGES)
    question = {"role": "user", "content": [{"type": "text", "text": "First question " * 300}]}
    tool_use = {"type": "tool_use", "id": "toolu_1", "name": "a_tool", "input": {}}
    tool_result = {"type": "tool_result", "tool_use_id": "toolu_1", "content": "Found it. " * 300}
    loop = [question, {"role": "assistant", "content": [tool_use]}, {"role": "user", "content": [tool_result]}]
    sent = []
    for messages in (loop[:1], loop):
        kwargs = {
            "model": "claude-sonnet-5",
            "max_tokens": 10,
            "tools": TOOLS,
            "system": f"Request ID: 7f3c9a2e41\n{LONG_SYSTEM}",
            "messages": messages,
        }
        call = adapter.to_call(json.loads(json.dumps(kwargs)), Provider.ANTHROPIC)
        canonicalize(call, sdk.Policy(), adapter)  # no family memory: the request id moves
        place_cache_hints(call, sdk.Policy(), adapter)
        assert "cache_breakpoint:last_turn" in call.decided.changes
        sent.append(adapter.to_kwargs(call)["messages"])
    first = sent[0][0]["content"]  # the loop's first call: the question, then the note, marked as the last block ...
    assert is_note(first[1]) and "cache_control" in first[1]
    assert first[0] == {
        **question["content"][0],
        "cache_control": {"type": "ephemeral"},
    }  # ... and the question before it
    unmarked = [
        {key: value for key, value in block.items() if key != "cache_control"} for block in sent[1][0]["content"]
    ]
    assert unmarked == [
        {key: value for key, value in block.items() if key != "cache_control"} for block in first
    ]  # re-sent as it was
    assert [block["type"] for block in sent[1][-1]["content"]] == ["tool_result"] and "cache_control" in sent[1][-1][
        "content"
    ][0]


def test_a_callers_mark_at_the_end_of_its_text_does_not_stand_in_for_the_last_turns_end_past_the_note():
    from sdk.prompt.canonical import canonicalize
    from sdk.prompt.moving import is_note

    adapter = adapter_for(Api.MESSAGES)
    marked = {
        "type": "text",
        "text": "First question " * 300,
        "cache_control": {"type": "ephemeral"},
    }  # pydantic-ai's anthropic_cache
    kwargs = {
        "model": "claude-sonnet-5",
        "max_tokens": 10,
        "tools": TOOLS,
        "system": f"Request ID: 7f3c9a2e41\n{LONG_SYSTEM}",
        "messages": [{"role": "user", "content": [marked]}],
    }
    call = adapter.to_call(json.loads(json.dumps(kwargs)), Provider.ANTHROPIC)
    canonicalize(call, sdk.Policy(), adapter)  # no family memory: the request id moves
    place_cache_hints(call, sdk.Policy(), adapter)
    content = adapter.to_kwargs(call)["messages"][0]["content"]
    assert content[0] == marked  # the caller's mark, where it put it: the text is read whatever the note says
    assert is_note(content[1]) and "cache_control" in content[1]  # and the turn's end: the next call reads the note too
    assert count_breakpoints(adapter.to_kwargs(call), "cache_control") <= 4


def test_the_tail_note_is_never_marked_the_last_turns_mark_sits_on_the_block_before_it():
    from sdk.prompt.canonical import canonicalize
    from sdk.prompt.families import FamilyMemory
    from sdk.prompt.moving import is_note

    adapter, families = adapter_for(Api.MESSAGES), FamilyMemory()
    tool_use = {"type": "tool_use", "id": "toolu_1", "name": "a_tool", "input": {}}
    tool_result = {"type": "tool_result", "tool_use_id": "toolu_1", "content": "Found it. " * 300}

    def send(request_id: str, stamp: str, question: str, grown: bool) -> list:
        user = {"role": "user", "content": question * 300}
        messages = (
            [user, {"role": "assistant", "content": [tool_use]}, {"role": "user", "content": [tool_result]}]
            if grown
            else [user]
        )
        kwargs = {
            "model": "claude-sonnet-5",
            "max_tokens": 10,
            "tools": TOOLS,
            "messages": messages,
            "system": f"Request ID: {request_id}\nCurrent time: {stamp}\n{LONG_SYSTEM}",
        }
        call = adapter.to_call(json.loads(json.dumps(kwargs)), Provider.ANTHROPIC)
        canonicalize(call, sdk.Policy(), adapter, families)
        place_cache_hints(call, sdk.Policy(), adapter)
        assert "cache_breakpoint:last_turn" in call.decided.changes
        return adapter.to_kwargs(call)["messages"]

    send("7f3c9a2e41", "2026-12-01T09:00:00+00:00", "First question ", grown=False)  # the family's first call
    results = send("7f3c9a2e41", "2026-12-01T09:00:05+00:00", "First question ", grown=True)[-1]["content"]
    assert (
        is_note(results[-1]) and "Current time" in results[-1]["text"] and "cache_control" not in results[-1]
    )  # the tail
    assert (
        results[0]["type"] == "tool_result" and "cache_control" in results[0]
    )  # the block before it: re-sent as it is
    first = send("0b1d2e3f4a", "2026-12-01T09:01:00+00:00", "Second question ", grown=False)[0]["content"]
    assert [is_note(block) for block in first] == [
        False,
        True,
        True,
    ]  # the text, the conversation's note, the tail note
    assert "Request ID" in first[1]["text"] and "cache_control" in first[1]  # the first turn's note stays markable
    assert "Current time" in first[2]["text"] and "cache_control" not in first[2]


async def test_a_one_hour_ttl_reaches_openai_as_prompt_cache_retention_named_or_in_extra_body_as_the_client_takes_it(
    simulator, openai_client
):
    wrapped = sdk.wrap(openai_client, provider="openai", policy=sdk.Policy(cache_ttl="1h"))
    await resolve(
        wrapped.chat.completions.create(
            model="m", messages=[{"role": "system", "content": LONG_SYSTEM}, {"role": "user", "content": "x"}]
        )
    )
    body = simulator.requests[-1].body
    assert body["prompt_cache_retention"] == "24h" and body["prompt_cache_key"].startswith("kvwise-")


_KEY = "prompt_cache_key"


@pytest.mark.parametrize(
    ("takes", "extra_body", "where", "change"),
    [
        (None, None, "named", _KEY),
        (frozenset({"model", "messages", _KEY, "extra_body"}), None, "named", _KEY),
        (frozenset({"model", "messages", "extra_body"}), None, "extra_body", f"{_KEY}:extra_body"),
        (frozenset({"model", "messages", "extra_body"}), {"a": 1}, "extra_body", f"{_KEY}:extra_body"),
        (frozenset({"model", "messages", "extra_body"}), {_KEY: "mine"}, "the caller's", None),
        (
            frozenset({"model", "messages"}),
            None,
            "nowhere",
            f"{_KEY}:left_out:the client's method takes neither it nor extra_body",
        ),
    ],
    ids=[
        "any",
        "named",
        "older_client_extra_body",
        "merged_with_the_callers",
        "the_callers_own_in_extra_body",
        "left_out",
    ],
)
def test_a_hint_the_clients_method_does_not_take_goes_in_extra_body_else_is_left_out_and_the_span_says_so(
    takes, extra_body, where, change
):
    adapter = adapter_for(Api.CHAT)
    kwargs = {
        "model": "m",
        "messages": [{"role": "user", "content": "x"}],
        **({"extra_body": dict(extra_body)} if extra_body else {}),
    }
    call = adapter.to_call(kwargs, Provider.OPENAI)
    call.takes = takes
    place_cache_hints(call, sdk.Policy(), adapter)
    out = adapter.to_kwargs(call)
    named, extra = out.get(_KEY), out.get("extra_body") or {}
    assert {key: value for key, value in extra.items() if key != _KEY} == {
        key: value for key, value in (extra_body or {}).items() if key != _KEY
    }
    found = {
        "named": named,
        "extra_body": extra.get(_KEY),
        "the caller's": extra.get(_KEY),
        "nowhere": named or extra.get(_KEY),
    }[where]
    assert (
        found == "mine"
        if where == "the caller's"
        else (found is None if where == "nowhere" else found.startswith("kvwise-"))
    )
    assert (_KEY in out) is (where == "named")
    assert [c for c in call.decided.changes if c.startswith(_KEY)] == ([change] if change else [])
