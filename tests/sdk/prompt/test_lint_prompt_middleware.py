"""sdk.lint, sdk.Prompt and user middleware."""

from __future__ import annotations

import pytest

import sdk
from sdk.prompt.canonical import NOTE_CLOSE, NOTE_OPEN
from tests.sdk.helpers import LONG_SYSTEM, resolve

UUID = "3f2a8c1e-9b4d-4e7a-8f1c-2d5e6a7b8c9d"


def test_lint_finds_volatile_bytes_unsorted_tools_short_prefix_and_missing_cap():
    kwargs = {
        "model": "m",
        "messages": [{"role": "system", "content": f"Request ID: {UUID}"}, {"role": "user", "content": "hi"}],
        "tools": [
            {"type": "function", "function": {"name": "zeta"}},
            {"type": "function", "function": {"name": "alpha"}},
        ],
    }
    codes = {finding.code for finding in sdk.lint(kwargs, provider="openai")}
    assert codes == {"volatile_in_prefix", "unstable_tool_order", "prefix_below_minimum", "missing_max_tokens"}


def test_lint_is_quiet_on_a_cache_friendly_call():
    kwargs = {
        "model": "claude-sonnet-4-6",
        "system": LONG_SYSTEM,
        "max_tokens": 100,
        "messages": [{"role": "user", "content": "hi"}],
    }
    assert sdk.lint(kwargs, provider="anthropic") == []


def test_lint_rejects_an_unknown_provider():
    with pytest.raises(ValueError, match="provider"):
        sdk.lint({"model": "m", "messages": []}, provider="palm")


def test_prompt_renders_tiers_in_canonical_order_for_anthropic_with_breakpoints():
    prompt = sdk.Prompt(
        system=LONG_SYSTEM,
        documents=["Policy document. " * 200],
        tools=[{"name": "zz", "input_schema": {"type": "object"}}, {"name": "aa", "input_schema": {"type": "object"}}],
        history=[{"role": "user", "content": "earlier"}, {"role": "assistant", "content": "reply"}],
        dynamic={"Request ID": UUID},
        user="Summarise.",
    )
    kwargs = prompt.to_anthropic(model="claude-sonnet-4-6", max_tokens=100)
    assert [tool["name"] for tool in kwargs["tools"]] == ["aa", "zz"]
    assert kwargs["system"][0]["text"] == LONG_SYSTEM and "cache_control" in kwargs["system"][-1]
    final = kwargs["messages"][-1]["content"]  # the user content, then the note ending it (tools offered: marked)
    assert final == [
        {"type": "text", "text": "Summarise."},
        {
            "type": "text",
            "text": f"{NOTE_OPEN}\nRequest ID: {UUID}\n{NOTE_CLOSE}",
            "cache_control": {"type": "ephemeral"},
        },
    ]
    assert kwargs["messages"][0]["content"] == "earlier"


async def test_prompt_renders_for_openai_and_the_call_goes_through(simulator, openai_client):
    prompt = sdk.Prompt(system="Be brief.", user="hi", dynamic={"Now": "2026-11-29T08:55:21Z"})
    response = await resolve(sdk.wrap(openai_client).chat.completions.create(**prompt.to_openai(model="m")))
    assert response.choices[0].message.content == simulator.reply
    assert simulator.requests[-1].body["messages"][0] == {"role": "system", "content": "Be brief."}


def test_prompt_rejects_an_empty_user_turn():
    with pytest.raises(ValueError, match="user"):
        sdk.Prompt(user="")


async def test_user_middleware_runs_on_every_call(simulator, openai_client):
    class TagUser:
        def on_request(self, call):
            call.params.setdefault("user", "team-a")

    wrapped = sdk.wrap(openai_client, middleware=[TagUser()])
    await resolve(wrapped.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}]))
    assert simulator.requests[-1].body["user"] == "team-a"


def test_middleware_without_on_request_is_rejected(simulator):
    import openai

    with pytest.raises(TypeError, match="on_request"):
        sdk.wrap(openai.OpenAI(base_url=simulator.openai_base_url, api_key="k"), middleware=[object()])
