"""Canonical order: tiers, tool sorting, volatile moving; idempotent and content-preserving."""

from __future__ import annotations

import collections
import copy
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import sdk
from sdk.adapters import adapter_for
from sdk.call import Api, Provider
from sdk.prompt.canonical import NOTE_CLOSE, NOTE_OPEN, canonicalize
from sdk.prompt.moving import is_note

UUID = "3f2a8c1e-9b4d-4e7a-8f1c-2d5e6a7b8c9d"


def _canonical(kwargs: dict, api: Api = Api.CHAT, policy: sdk.Policy | None = None) -> tuple[dict, list[str]]:
    adapter = adapter_for(api)
    call = adapter.to_call(copy.deepcopy(kwargs), Provider.OPENAI)
    canonicalize(call, policy or sdk.Policy(), adapter)
    return adapter.to_kwargs(call), call.decided.changes


def test_volatile_lines_move_from_the_system_prompt_to_a_note_that_ends_the_first_user_turn_and_no_turn_is_added():
    kwargs = {
        "model": "m",
        "messages": [
            {"role": "system", "content": f"Request ID: {UUID}\nYou are a careful assistant."},
            {"role": "user", "content": "Hello"},
        ],
    }
    out, changes = _canonical(kwargs)
    assert UUID not in out["messages"][0]["content"]
    assert out["messages"][0]["content"].strip() == "You are a careful assistant."
    assert out["messages"][1:] == [
        {"role": "user", "content": f"Hello\n\n{NOTE_OPEN}\nRequest ID: {UUID}\n{NOTE_CLOSE}"}
    ]
    assert any(change.startswith("volatile_moved") for change in changes)


def test_anthropic_note_ends_the_first_user_turn_and_the_tool_results_go_out_untouched():
    tool_loop = [
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}]},
    ]
    kwargs = {
        "model": "claude-sonnet-4-6",
        "system": f"Session {UUID} started. Be brief.",
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}, *tool_loop],
    }
    out, _ = _canonical(kwargs, Api.MESSAGES)
    first = out["messages"][0]["content"]
    assert first[0] == {"type": "text", "text": "hi"}
    assert first[1]["type"] == "text" and is_note(first[1]) and UUID in first[1]["text"]
    assert out["messages"][1:] == tool_loop
    assert UUID not in json.dumps(out["system"])


def test_warn_mode_records_volatile_bytes_but_moves_nothing():
    kwargs = {"model": "m", "messages": [{"role": "system", "content": f"id {UUID}"}, {"role": "user", "content": "q"}]}
    out, changes = _canonical(kwargs, policy=sdk.Policy(volatile="warn"))
    assert out["messages"] == kwargs["messages"]
    assert "volatile_found:uuid" in [change.lower() for change in changes]


def test_turns_are_never_reordered_and_the_schema_key_order_is_kept():
    schema = {
        "type": "object",
        "properties": {"zeta": {"type": "string"}, "alpha": {"type": "string"}},
        "required": ["zeta", "alpha"],
    }
    kwargs = {
        "model": "m",
        "tools": [
            {"type": "function", "function": {"parameters": schema, "name": "b"}},
            {"type": "function", "function": {"name": "a"}},
        ],
        "messages": [
            {"role": "user", "content": "1"},
            {"role": "assistant", "content": "2"},
            {"role": "user", "content": "3"},
        ],
    }
    out, _ = _canonical(kwargs)
    assert [m["content"] for m in out["messages"]] == ["1", "2", "3"]
    assert [t["function"]["name"] for t in out["tools"]] == ["a", "b"]
    assert list(out["tools"][1]["function"]["parameters"]["properties"]) == ["zeta", "alpha"]
    assert list(out["tools"][1]["function"]) == ["name", "parameters"]


text_strategy = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=200)
volatile_tokens = st.sampled_from([UUID, "2026-11-29T08:55:21Z", "Request ID: req_8f3a2b1c9d7e6f5a", "1764406521", ""])


@st.composite
def chat_calls(draw):
    system = draw(text_strategy) + " " + draw(volatile_tokens) + " " + draw(text_strategy)
    turns = draw(st.lists(text_strategy, min_size=1, max_size=5))
    roles = ["user" if i % 2 == 0 else "assistant" for i in range(len(turns))]
    if roles[-1] != "user":
        turns.append(draw(text_strategy))
        roles.append("user")
    names = draw(st.lists(st.text(alphabet="abcdefgh", min_size=1, max_size=6), max_size=4, unique=True))
    tools = [{"type": "function", "function": {"name": name, "description": draw(text_strategy)}} for name in names]
    messages = [{"role": "system", "content": system}] + [{"role": r, "content": t} for r, t in zip(roles, turns)]
    return {"model": "m", "messages": messages, "tools": tools}


def _chars(value: object) -> list[str]:
    return sorted(c for c in json.dumps(value, ensure_ascii=False) if not c.isspace())


@settings(max_examples=150, deadline=None)
@given(chat_calls())
def test_canonicalisation_is_idempotent(kwargs):
    once, _ = _canonical(kwargs)
    twice, changes = _canonical(once)
    assert twice == once
    assert not [c for c in changes if c.startswith("volatile_moved")]


@settings(max_examples=150, deadline=None)
@given(chat_calls())
def test_canonicalisation_preserves_every_character(kwargs):
    out, _ = _canonical(kwargs)
    original = _chars([m["content"] for m in kwargs["messages"]] + [t["function"] for t in kwargs["tools"]])
    result = "".join(_chars([m["content"] for m in out["messages"]] + [t["function"] for t in out.get("tools", [])]))
    remaining = list(result)
    for char in original:
        assert char in remaining
        remaining.remove(char)


@settings(max_examples=150, deadline=None)
@given(chat_calls())
def test_canonicalisation_keeps_every_turn_as_written_in_order_and_a_note_only_at_the_end_of_the_first_user_turn(
    kwargs,
):
    out, changes = _canonical(kwargs)
    turns_in = [m for m in kwargs["messages"] if m["role"] != "system"]
    turns_out = [m for m in out["messages"] if m["role"] != "system"]
    moved = any(change.startswith("volatile_moved") for change in changes)
    assert turns_out[1:] == turns_in[1:]
    first_in, first_out = turns_in[0]["content"], turns_out[0]["content"]
    if not moved:
        assert first_out == first_in
    else:
        caller, _, note = first_out.rpartition(NOTE_OPEN)
        assert (
            caller == (f"{first_in}\n\n" if first_in else "")
            and note.endswith(NOTE_CLOSE)
            and NOTE_CLOSE not in note[: -len(NOTE_CLOSE)]
        )


# Fuzzing: any API's messages, any text and content blocks; garbage is refused with a TypeError naming the
# method, never an internal error.

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=10,
)
any_text = st.one_of(text_strategy, st.tuples(text_strategy, volatile_tokens, text_strategy).map(" ".join))
API_KEYS = {
    Api.CHAT: ("messages", "system", "text"),
    Api.MESSAGES: ("messages", "system", "text"),
    Api.RESPONSES: ("input", "instructions", "input_text"),
}
METHODS = {Api.CHAT: "chat.completions.create", Api.MESSAGES: "messages.create", Api.RESPONSES: "responses.create"}
STRUCTURE_KEYS = frozenset({"type", "role", "cache_control", "id", "tool_use_id", "name"})


@st.composite
def any_call(draw, api: Api) -> dict:
    """A well-formed call of `api`: text or text blocks (with or without volatile bytes) in every tier."""
    messages_key, system_key, part_type = API_KEYS[api]
    blocks = st.lists(any_text.map(lambda t: {"type": part_type, "text": t}), min_size=1, max_size=3)
    turns = draw(st.lists(any_text | blocks, min_size=1, max_size=5))
    if len(turns) % 2 == 0:
        turns.append(draw(any_text))
    messages = [{"role": "user" if i % 2 == 0 else "assistant", "content": t} for i, t in enumerate(turns)]
    system = draw(any_text | (blocks if api is Api.MESSAGES else any_text))
    if api is Api.CHAT:
        messages.insert(0, {"role": "system", "content": system})
        kwargs = {"model": "m", messages_key: messages}
    else:
        kwargs = {"model": "m", messages_key: messages, system_key: system}
    return kwargs


def _canonical_any(kwargs: dict, api: Api) -> dict:
    adapter = adapter_for(api)
    provider = Provider.ANTHROPIC if api is Api.MESSAGES else Provider.OPENAI
    call = adapter.to_call(copy.deepcopy(kwargs), provider)
    canonicalize(call, sdk.Policy(), adapter)
    return adapter.to_kwargs(call)


def _text_chars(value: object, key: str | None = None) -> list[str]:
    """Non-space characters of every string in `value`, except structural ones (types, roles, ids)."""
    if isinstance(value, str):
        return [] if key in STRUCTURE_KEYS else [c for c in value if not c.isspace()]
    if isinstance(value, dict):
        return [c for k, v in value.items() for c in _text_chars(v, k)]
    if isinstance(value, list):
        return [c for v in value for c in _text_chars(v, key)]
    return []


@settings(max_examples=100, deadline=None)
@given(data=st.data())
@pytest.mark.parametrize("api", list(API_KEYS), ids=[api.value for api in API_KEYS])
def test_any_well_formed_call_of_any_api_canonicalises_idempotently_keeping_every_character(api, data):
    kwargs = data.draw(any_call(api))
    once = _canonical_any(kwargs, api)
    assert _canonical_any(once, api) == once
    remaining = collections.Counter(_text_chars(once))
    remaining.subtract(_text_chars(kwargs))
    assert not -remaining, f"characters lost: {sorted((-remaining).elements())}"


@settings(max_examples=150, deadline=None)
@given(data=st.data(), messages=json_values, system=json_values, tools=json_values)
@pytest.mark.parametrize("api", list(API_KEYS), ids=[api.value for api in API_KEYS])
def test_any_json_in_a_call_is_canonicalised_or_refused_with_a_type_error_naming_the_method(
    api, data, messages, system, tools
):
    messages_key, system_key, _ = API_KEYS[api]
    messages = data.draw(st.just(messages) | st.lists(json_values, max_size=4))
    kwargs = {"model": "m", messages_key: messages, system_key: system, "tools": tools}
    try:
        _canonical_any(kwargs, api)
    except TypeError as exc:
        assert str(exc).startswith(f"{METHODS[api]}:"), exc


@pytest.mark.parametrize("mark", ["cache_control", "prompt_cache_breakpoint"])
def test_a_breakpoint_on_the_last_tool_moves_to_the_tool_that_is_last_after_sorting(mark):
    api = Api.MESSAGES if mark == "cache_control" else Api.RESPONSES
    tools = [
        {"type": "function", "name": "zeta", "parameters": {}},
        {"type": "function", "name": "beta", "parameters": {}, mark: {"type": "ephemeral"}},
        {"type": "function", "name": "alpha", "parameters": {}, mark: {"type": "ephemeral"}},
    ]
    kwargs = {"model": "m", "tools": tools, "max_tokens": 5}
    kwargs["messages" if api is Api.MESSAGES else "input"] = [{"role": "user", "content": "q"}]
    out, changes = _canonical(kwargs, api)
    assert [(tool["name"], mark in tool) for tool in out["tools"]] == [("alpha", False), ("beta", True), ("zeta", True)]
    assert "tools_breakpoint_moved" in changes
    again, changes = _canonical(out, api)
    assert again == out and "tools_breakpoint_moved" not in changes


def test_a_breakpoint_on_a_tool_that_stays_last_or_on_an_inner_tool_stays_where_the_caller_put_it():
    tools = [{"name": "b", "cache_control": {"type": "ephemeral"}}, {"name": "c"}, {"name": "a"}]
    out, changes = _canonical(
        {"model": "m", "tools": tools, "messages": [{"role": "user", "content": "q"}]}, Api.MESSAGES
    )
    assert [(tool["name"], "cache_control" in tool) for tool in out["tools"]] == [
        ("a", False),
        ("b", True),
        ("c", False),
    ]
    assert "tools_breakpoint_moved" not in changes


@pytest.mark.parametrize(
    ("api", "part_type"), [(Api.CHAT, "text"), (Api.RESPONSES, "input_text"), (Api.MESSAGES, "text")]
)
def test_a_first_turn_sent_as_a_string_or_as_one_text_part_reads_the_same_with_the_note(api, part_type):
    messages_key, system_key = API_KEYS[api][:2]
    system = f"Request ID: {UUID}\nBe brief."

    def sent(content: object) -> object:
        turns = [{"role": "user", "content": content}]
        if api is Api.CHAT:
            return _canonical_any({"model": "m", "messages": [{"role": "system", "content": system}, *turns]}, api)[
                "messages"
            ][1]["content"]
        return _canonical_any({"model": "m", system_key: system, messages_key: turns}, api)[messages_key][0]["content"]

    as_string, as_part = sent("Plan my week."), sent([{"type": part_type, "text": "Plan my week."}])
    note = f"{NOTE_OPEN}\nRequest ID: {UUID}\n{NOTE_CLOSE}"
    if api is Api.MESSAGES:  # a block of its own, so a breakpoint at the end of the caller's text stays before it
        assert as_string == as_part == [{"type": "text", "text": "Plan my week."}, {"type": "text", "text": note}]
    else:  # the string stays a string; the part's text ends the same way
        assert as_string == f"Plan my week.\n\n{note}" and as_part == [{"type": part_type, "text": as_string}]
