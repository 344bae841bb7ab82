"""Strict requests: every field the installed clients' request types name is honoured (its effect is
seen in the answer), inert (the answer is unchanged) or refused with a 400 naming it; never ignored.

The fields come from the clients' own TypedDicts (`ChatCompletionCreateParams`,
`CompletionCreateParams`, `MessageCreateParams`), so a field a new client release adds fails
`test_every_field_the_client_can_send_has_a_rule` until the server decides what to do with it.
"""

from __future__ import annotations

import json
import typing
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import anthropic
import httpx2
import openai
import pytest
import typing_extensions
from anthropic.types import message_count_tokens_params, message_create_params
from openai.types import completion_create_params
from openai.types.chat import completion_create_params as chat_create_params
from openai.types.responses import response_create_params

from local_backend import Engine
from local_backend.server import create_app, fields, histories, serve_in_thread
from local_backend.server.histories import ANTHROPIC_ROLES

NAMES = ("tiny", "tiny-alias")
SEEDS = (1, 2, 3, 4, 5)
ORIGIN = "http://app.example"
QUESTION = "What is the capital of France?"  # the bundled model answers it, and samples vary


@dataclass(frozen=True)
class ParsedAnswer:
    texts: list[str]
    finishes: list[str]
    prompt_tokens: int
    output_tokens: int
    model: str
    chunks: int = 0
    usage_chunk: bool = False
    logprobs: Any = None  # the first choice's, as the client parsed them
    metadata: Any = None  # a Response's
    calls: list[int] = field(default_factory=list)  # tool calls per choice


@dataclass(frozen=True)
class Endpoint:
    name: str
    types: tuple[type, ...]
    table: fields.Table
    base: dict[str, Any] = field(default_factory=dict)

    @property
    def client_fields(self) -> set[str]:
        return {name for t in self.types for name in typing.get_type_hints(t)}


PROMPT = {"messages": [{"role": "user", "content": QUESTION}]}
ENDPOINTS = {
    "chat": Endpoint(
        "chat",
        (chat_create_params.CompletionCreateParamsNonStreaming, chat_create_params.CompletionCreateParamsStreaming),
        fields.CHAT,
        PROMPT,
    ),
    "completions": Endpoint(
        "completions",
        (
            completion_create_params.CompletionCreateParamsNonStreaming,
            completion_create_params.CompletionCreateParamsStreaming,
        ),
        fields.COMPLETIONS,
        {"prompt": "What is prefill?"},
    ),
    "messages": Endpoint(
        "messages",
        (message_create_params.MessageCreateParamsNonStreaming, message_create_params.MessageCreateParamsStreaming),
        fields.MESSAGES,
        PROMPT,
    ),
    "responses": Endpoint(
        "responses",
        (response_create_params.ResponseCreateParamsNonStreaming, response_create_params.ResponseCreateParamsStreaming),
        fields.RESPONSES,
        {"input": QUESTION},
    ),
    "count_tokens": Endpoint(
        "count_tokens", (message_count_tokens_params.MessageCountTokensParams,), fields.COUNT_TOKENS, PROMPT
    ),
}
BASE = {"model": "tiny", "max_tokens": 12, "temperature": 0, "ignore_eos": True}
"""Every generating request's fields besides its endpoint's own (a count has only `model`, a
Responses request says `max_output_tokens`)."""

TOOL = {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}}}}
ON_VALUES: dict[str, dict[str, Any]] = {
    "chat": {
        "service_tier": "flex",
        "store": True,
        "modalities": ["text", "audio"],
        "response_format": {"type": "json_object"},
        "tools": [TOOL],
        "tool_choice": "auto",
        "parallel_tool_calls": True,
        "functions": [TOOL["function"]],
        "function_call": "auto",
        "audio": {"voice": "alloy", "format": "wav"},
        "prediction": {"type": "content", "content": "Hello"},
        "reasoning_effort": "high",
        "verbosity": "low",
        "web_search_options": {},
        "moderation": {"model": "omni-moderation-latest"},
    },
    "completions": {"best_of": 2, "suffix": " the end"},
    "messages": {
        "speed": "fast",
        "inference_geo": "us",
        "diagnostics": {"previous_message_id": "msg_1"},
        "container": "container_1",
        "output_config": {"effort": "low"},
        "thinking": {"type": "enabled", "budget_tokens": 1024},
        "tools": [{"name": "f", "input_schema": {"type": "object"}}],
        "tool_choice": {"type": "auto"},
    },
}
ON_VALUES["count_tokens"] = ON_VALUES["messages"]
ON_VALUES["responses"] = {
    "service_tier": "flex",
    "store": True,
    "background": True,
    "stream_options": {"include_obfuscation": True},
    "truncation": "auto",
    "include": ["message.output_text.logprobs"],
    "text": {"format": {"type": "json_object"}},
    "tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}}],
    "tool_choice": "auto",
    "parallel_tool_calls": False,
    "max_tool_calls": 2,
    "top_logprobs": 2,
    "reasoning": {"effort": "low"},
    "previous_response_id": "resp_1",
    "conversation": "conv_1",
    "prompt": {"id": "pmpt_1"},
    "context_management": [{"type": "compaction"}],
    "background_options": {"completion_window": "2h"},
    "moderation": {"model": "omni-moderation-latest"},
    "image": {"context_compression": "enabled"},
    "access_programs": {"cyber": "standard"},
}
INERT_VALUES: dict[str, Any] = {
    "output_config": {"format": {"type": "json_schema", "schema": {"type": "object"}}},
    "user": "user-1",
    "metadata": {"user_id": "u1"},
    "safety_identifier": "s1",
    "prompt_cache_key": "k1",
    "prompt_cache_retention": "24h",
    "prompt_cache_options": {"ttl": "1h"},
    "cache_control": {"type": "ephemeral"},
    "user_profile_id": "profile-1",
    "workspace_id": "wrkspc_1",
    "service_tier": "standard_only",
}


@pytest.fixture(scope="module")
def base_url() -> Iterator[str]:
    engine = Engine.from_pretrained("default", device="cpu", max_model_len=512, kv_cache_memory=2**22)
    try:
        with serve_in_thread(create_app(engine, model_name=NAMES, allowed_origins=[ORIGIN])) as url:
            yield url
    finally:
        engine.close()


def _ask(base_url: str, endpoint: Endpoint, request: dict[str, Any]) -> ParsedAnswer:
    """One call with the real client: the client's own fields as arguments, the rest in `extra_body`."""
    known = endpoint.client_fields
    kwargs = {k: v for k, v in request.items() if k in known}
    extra = {k: v for k, v in request.items() if k not in known}
    if endpoint.name in ("messages", "count_tokens"):
        with anthropic.Anthropic(base_url=base_url, api_key="unused", max_retries=0) as client:
            if endpoint.name == "count_tokens":
                counted = client.messages.count_tokens(**kwargs, extra_body=extra)
                return ParsedAnswer([], [], counted.input_tokens, 0, "")
            return _message_answer(client.messages.create(**kwargs, extra_body=extra))
    with openai.OpenAI(base_url=f"{base_url}/v1", api_key="unused", max_retries=0) as client:
        if endpoint.name == "responses":
            return _response_answer(client.responses.create(**kwargs, extra_body=extra))
        create = client.chat.completions.create if endpoint.name == "chat" else client.completions.create
        return _openai_answer(create(**kwargs, extra_body=extra), chat=endpoint.name == "chat")


def _openai_answer(response: Any, chat: bool) -> ParsedAnswer:
    if not isinstance(response, openai.Stream):
        texts = [c.message.content if chat else c.text for c in response.choices]
        usage = response.usage
        calls = [len(c.message.tool_calls or ()) for c in response.choices] if chat else []
        return ParsedAnswer(
            texts,
            [c.finish_reason for c in response.choices],
            usage.prompt_tokens,
            usage.completion_tokens,
            response.model,
            logprobs=response.choices[0].logprobs,
            calls=calls,
        )
    chunks = list(response)
    by_index: dict[int, list[str]] = {}
    finishes: dict[int, str] = {}
    for chunk in chunks:
        for c in chunk.choices:
            by_index.setdefault(c.index, []).append((c.delta.content if chat else c.text) or "")
            if c.finish_reason:
                finishes[c.index] = c.finish_reason
    usage = chunks[-1].usage
    return ParsedAnswer(
        ["".join(by_index[i]) for i in sorted(by_index)],
        [finishes[i] for i in sorted(finishes)],
        usage.prompt_tokens if usage else 0,
        usage.completion_tokens if usage else 0,
        chunks[0].model,
        chunks=len(chunks),
        usage_chunk=usage is not None,
    )


def _response_answer(response: Any) -> ParsedAnswer:
    chunks = 0
    if isinstance(response, openai.Stream):
        events = list(response)
        chunks, response = len(events), events[-1].response
    finish = "length" if response.status == "incomplete" else "stop"
    usage = response.usage
    calls = [sum(item.type == "function_call" for item in response.output)]
    return ParsedAnswer(
        [response.output_text],
        [finish],
        usage.input_tokens,
        usage.output_tokens,
        response.model,
        chunks=chunks,
        metadata=response.metadata,
        calls=calls,
    )


def _message_answer(response: Any) -> ParsedAnswer:
    if isinstance(response, anthropic.Stream):
        with response:
            events = list(response)
        start = events[0].message
        text = "".join(e.delta.text for e in events if e.type == "content_block_delta")
        last = next(e for e in events if e.type == "message_delta")
        finish = "length" if last.delta.stop_reason == "max_tokens" else "stop"
        usage = start.usage
        prompt = usage.input_tokens + usage.cache_read_input_tokens + usage.cache_creation_input_tokens
        return ParsedAnswer([text], [finish], prompt, last.usage.output_tokens, start.model, chunks=len(events))
    usage = response.usage
    prompt = usage.input_tokens + usage.cache_read_input_tokens + usage.cache_creation_input_tokens
    finish = "length" if response.stop_reason == "max_tokens" else "stop"
    calls = sum(b.type == "tool_use" for b in response.content)
    finish = "tool_calls" if response.stop_reason == "tool_use" else finish
    return ParsedAnswer(
        ["".join(b.text for b in response.content if b.type == "text")],
        [finish],
        prompt,
        usage.output_tokens,
        response.model,
        calls=[calls],
    )


Ask = Callable[..., ParsedAnswer]


def _refusal(ask: Ask, **request: Any) -> tuple[int, str, str | None]:
    """Status, message and (OpenAI) param of a refused request."""
    with pytest.raises((openai.APIStatusError, anthropic.APIStatusError)) as caught:
        ask(**request)
    body = caught.value.body  # openai's is the `error` object, anthropic's the whole body
    error = body.get("error", body) if isinstance(body, dict) else {}
    return caught.value.status_code, error.get("message", ""), error.get("param")


def _assert_refused_naming(ask: Ask, name: str, status: int = 400, **request: Any) -> None:
    code, message, param = _refusal(ask, **request)
    assert code == status
    assert message.startswith(name) or param == name, (message, param)


@pytest.fixture(params=list(ENDPOINTS))
def endpoint(request: pytest.FixtureRequest) -> Endpoint:
    return ENDPOINTS[request.param]


def _asker(base_url: str, endpoint: Endpoint) -> Ask:
    base = {"model": "tiny"} if endpoint.name == "count_tokens" else BASE

    def ask(**over: Any) -> ParsedAnswer:
        request = {**base, **endpoint.base, **over}
        if endpoint.name == "responses":  # the same cap, under its Responses name
            request["max_output_tokens"] = over.get("max_output_tokens", request.pop("max_tokens"))
        return _ask(base_url, endpoint, request)

    return ask


def _fields_of(use: type | fields.Use) -> list[tuple[str, str]]:
    return [
        (e.name, name)
        for e in ENDPOINTS.values()
        for name, rule in e.table.items()
        if (isinstance(rule, fields.Off) if use is fields.Off else rule is use)
    ]


def test_every_field_the_client_can_send_has_a_rule(endpoint):
    assert endpoint.client_fields - set(endpoint.table) == set()
    assert set(endpoint.table) - endpoint.client_fields <= fields.EXTENSIONS


@pytest.mark.parametrize(("name", "field_name"), _fields_of(fields.Off))
def test_a_field_of_a_missing_feature_is_refused_with_a_400_naming_it(base_url, name, field_name):
    endpoint = ENDPOINTS[name]
    _assert_refused_naming(_asker(base_url, endpoint), field_name, **{field_name: ON_VALUES[name][field_name]})


@pytest.mark.parametrize(("name", "field_name"), _fields_of(fields.INERT))
def test_an_inert_field_is_accepted_and_leaves_the_answer_unchanged(base_url, name, field_name):
    ask = _asker(base_url, ENDPOINTS[name])
    assert ask(**{field_name: INERT_VALUES[field_name]}) == ask()


def test_a_field_no_client_knows_is_refused_with_a_400_naming_it(base_url, endpoint):
    _assert_refused_naming(_asker(base_url, endpoint), "frobnicate", frobnicate=True)


def _greedy(ask: Ask, **over: Any) -> str:
    return ask(**over).texts[0]


def _sampled(ask: Ask, **over: Any) -> set[str]:
    return {ask(seed=seed, **over).texts[0] for seed in SEEDS}


def _check_model(ask: Ask) -> None:
    assert ask(model="tiny-alias").model == "tiny" and ask(model="tiny").texts == ask(model="tiny-alias").texts
    _assert_refused_naming(ask, "model", status=404, model="gpt-unknown")


def _check_stop(ask: Ask, name: str) -> None:
    text = _greedy(ask)
    stop = text[4:8]
    assert _greedy(ask, **{name: [stop]}) == text[: text.index(stop)]


def _check_penalty(name: str, value: float) -> Callable[[Ask], None]:
    def check(ask: Ask) -> None:
        assert _greedy(ask, max_tokens=32, **{name: value}) != _greedy(ask, max_tokens=32)

    return check


def _check_greedy_filter(name: str, value: float) -> Callable[[Ask], None]:
    def check(ask: Ask) -> None:
        assert _sampled(ask, temperature=1.0, **{name: value}) == {_greedy(ask)}

    return check


def _check_temperature(ask: Ask) -> None:
    assert len(_sampled(ask, temperature=1.0)) > 1 and _sampled(ask, temperature=0) == {_greedy(ask)}


def _check_seed(ask: Ask) -> None:
    assert ask(temperature=1.0, seed=7) == ask(temperature=1.0, seed=7)
    assert len(_sampled(ask, temperature=1.0)) > 1


def _check_max_tokens(name: str) -> Callable[[Ask], None]:
    def check(ask: Ask) -> None:
        answer = ask(**{name: 3})
        assert answer.output_tokens == 3 and answer.finishes == ["length"]

    return check


def _check_ignore_eos(ask: Ask) -> None:
    assert ask(ignore_eos=False, max_tokens=200).finishes == ["stop"]
    assert ask(ignore_eos=True, max_tokens=200).output_tokens == 200


def _check_stream(ask: Ask) -> None:
    whole, streamed = ask(), ask(stream=True)
    assert streamed.chunks > 2 and streamed.texts == whole.texts and streamed.finishes == whole.finishes


def _check_stream_options(ask: Ask) -> None:
    assert not ask(stream=True).usage_chunk
    streamed = ask(stream=True, stream_options={"include_usage": True})
    assert streamed.usage_chunk and streamed.output_tokens == ask().output_tokens


def _check_prompt_changes(name: str, other: Any) -> Callable[[Ask], None]:
    def check(ask: Ask) -> None:
        assert ask(**{name: other}).prompt_tokens != ask().prompt_tokens

    return check


def _check_n(ask: Ask) -> None:
    assert len(ask(n=1).texts) == 1
    sampled = ask(n=3, temperature=1.0, seed=3)
    assert len(sampled.texts) == 3 and len(set(sampled.texts)) > 1


def _check_echo(ask: Ask) -> None:
    plain, echoed = ask(), ask(echo=True)
    assert echoed.texts == [ENDPOINTS["completions"].base["prompt"] + plain.texts[0]]
    # the echo decodes the prompt only once the engine took it: ids outside the vocabulary are refused, not a 500
    for prompt in ([-1], [5, 10**12]):
        _assert_refused_naming(ask, "prompt", prompt=prompt, echo=True)


def _check_counted_model(ask: Ask) -> None:
    assert ask(model="tiny-alias") == ask()
    _assert_refused_naming(ask, "model", status=404, model="gpt-unknown")


def _check_chat_logprobs(ask: Ask) -> None:
    answer = ask(logprobs=True)
    assert ask().logprobs is None and len(answer.logprobs.content) == answer.output_tokens
    assert ask(logprobs=True, top_logprobs=0).logprobs.content[0].top_logprobs == []


def _check_top_logprobs(ask: Ask) -> None:
    assert all(len(entry.top_logprobs) == 2 for entry in ask(logprobs=True, top_logprobs=2).logprobs.content)


def _check_legacy_logprobs(ask: Ask) -> None:
    answer = ask(logprobs=2)
    assert ask().logprobs is None and len(answer.logprobs.tokens) == answer.output_tokens
    assert all(len(top) == 2 for top in answer.logprobs.top_logprobs)


def _check_metadata(ask: Ask) -> None:
    assert ask(metadata={"run": "7"}).metadata == {"run": "7"}


def _check_instructions(ask: Ask) -> None:
    assert ask(instructions="You are terse.").prompt_tokens > ask().prompt_tokens


def _check_chat_tools(ask: Ask) -> None:
    forced = ask(tools=[TOOL], tool_choice="required", max_tokens=60)
    assert forced.calls == [1] and forced.finishes == ["tool_calls"]
    assert ask(tools=[TOOL], tool_choice="none").prompt_tokens < ask(tools=[TOOL]).prompt_tokens  # listed when used


def _check_chat_tool_choice(ask: Ask) -> None:
    assert ask(tools=[TOOL], tool_choice="none").calls == [0]
    assert ask(tools=[TOOL], tool_choice={"type": "function", "function": {"name": "f"}}, max_tokens=60).calls == [1]


def _check_parallel_tool_calls(ask: Ask) -> None:
    # a forced call is one call; with parallel_tool_calls false at most one is ever returned
    assert ask(tools=[TOOL], tool_choice="required", parallel_tool_calls=False, max_tokens=60).calls == [1]


JSON_ASKED = [{"role": "user", "content": "Give me a JSON object."}]
"""json_object requests ask for JSON in words too, as OpenAI requires (free JSON from the tiny model
on an unrelated question can stay inside one string past any cap)."""


def _check_response_format(ask: Ask) -> None:
    with pytest.raises(ValueError):
        json.loads(ask(max_tokens=60).texts[0])
    answer = ask(max_tokens=60, messages=JSON_ASKED, response_format={"type": "json_object"}, ignore_eos=False)
    assert isinstance(json.loads(answer.texts[0]), dict)


ANTHROPIC_TOOL = {"name": "f", "input_schema": {"type": "object", "properties": {"x": {"enum": [1, 2]}}}}


def _check_anthropic_tools(ask: Ask) -> None:
    assert ask(tools=[ANTHROPIC_TOOL], tool_choice={"type": "any"}, max_tokens=60).calls == [1]
    assert ask(tools=[ANTHROPIC_TOOL]).prompt_tokens > ask().prompt_tokens


def _check_anthropic_tool_choice(ask: Ask) -> None:
    assert ask(tools=[ANTHROPIC_TOOL], tool_choice={"type": "none"}).calls == [0]
    assert ask(tools=[ANTHROPIC_TOOL], tool_choice={"type": "tool", "name": "f"}, max_tokens=60).calls == [1]


def _check_output_config(ask: Ask) -> None:
    schema = {"type": "object", "properties": {"x": {"enum": [1, 2]}}, "required": ["x"]}
    answer = ask(output_config={"format": {"type": "json_schema", "schema": schema}}, ignore_eos=False, max_tokens=60)
    assert json.loads(answer.texts[0])["x"] in (1, 2)
    _assert_refused_naming(ask, "output_config", output_config={"effort": "low"})


def _check_counted_tools(ask: Ask) -> None:
    assert ask(tools=[ANTHROPIC_TOOL]).prompt_tokens > ask().prompt_tokens
    assert ask(tools=[ANTHROPIC_TOOL], tool_choice={"type": "none"}).prompt_tokens == ask().prompt_tokens


FUNCTION = {"type": "function", "name": "f", "parameters": {"type": "object", "properties": {"x": {"enum": [1, 2]}}}}


def _check_responses_tools(ask: Ask) -> None:
    assert ask(tools=[FUNCTION], tool_choice="required", max_tokens=60).calls == [1]
    assert ask(tools=[FUNCTION]).prompt_tokens > ask().prompt_tokens


def _check_responses_tool_choice(ask: Ask) -> None:
    assert ask(tools=[FUNCTION], tool_choice="none").calls == [0]
    assert ask(tools=[FUNCTION], tool_choice={"type": "function", "name": "f"}, max_tokens=60).calls == [1]


def _check_text_format(ask: Ask) -> None:
    answer = ask(input=JSON_ASKED, text={"format": {"type": "json_object"}}, ignore_eos=False, max_tokens=60)
    assert isinstance(json.loads(answer.texts[0]), dict)
    _assert_refused_naming(ask, "text", text={"verbosity": "low"})


def _check_logit_bias(ask: Ask) -> None:
    one = ask(logit_bias={"42": 100}, max_tokens=1).texts[0]
    assert ask(logit_bias={"42": 100}, max_tokens=4).texts[0] == one * 4 != ask(max_tokens=4).texts[0]
    _assert_refused_naming(ask, "logit_bias", logit_bias={"42": 101})


def _check_json_schema(ask: Ask) -> None:  # llama.cpp's; more in test_server_client_inputs
    schema = {"type": "object", "properties": {"x": {"enum": [1, 2]}}, "required": ["x"]}
    assert json.loads(ask(json_schema=schema, ignore_eos=False, max_tokens=60).texts[0])["x"] in (1, 2)


def _check_grammar(ask: Ask) -> None:  # llama.cpp's GBNF; more in test_server_client_inputs
    assert ask(grammar='root ::= "yes" | "no"', ignore_eos=False).texts[0] in ("yes", "no")


def _check_chat_template_kwargs(ask: Ask) -> None:  # the bundled template reads none; see test_server_client_inputs
    assert ask(chat_template_kwargs={"persona": "pirate"}) == ask()
    _assert_refused_naming(ask, "chat_template_kwargs", chat_template_kwargs=["persona"])


def _check_system(ask: Ask) -> None:
    assert ask(system="You are terse.").prompt_tokens > ask().prompt_tokens


HONOURED_CHECKS: dict[str, Callable[[Ask], None]] = {
    "model": _check_model,
    "stop": lambda ask: _check_stop(ask, "stop"),
    "stop_sequences": lambda ask: _check_stop(ask, "stop_sequences"),
    "stream": _check_stream,
    "stream_options": _check_stream_options,
    "max_tokens": _check_max_tokens("max_tokens"),
    "max_completion_tokens": _check_max_tokens("max_completion_tokens"),
    "temperature": _check_temperature,
    "seed": _check_seed,
    "top_p": _check_greedy_filter("top_p", 1e-9),
    "top_k": _check_greedy_filter("top_k", 1),
    "min_p": _check_greedy_filter("min_p", 1.0),
    "frequency_penalty": _check_penalty("frequency_penalty", 2.0),
    "presence_penalty": _check_penalty("presence_penalty", 2.0),
    "repetition_penalty": _check_penalty("repetition_penalty", 2.0),
    "ignore_eos": _check_ignore_eos,
    "messages": _check_prompt_changes("messages", [{"role": "user", "content": "Hello"}]),
    "prompt": _check_prompt_changes(
        "prompt", "A KV cache stores keys and values for every layer and token of the prompt"
    ),
    "system": _check_system,
    "n": _check_n,
    "echo": _check_echo,
    "count_tokens.model": _check_counted_model,
    "chat.logprobs": _check_chat_logprobs,
    "top_logprobs": _check_top_logprobs,
    "completions.logprobs": _check_legacy_logprobs,
    "responses.metadata": _check_metadata,
    "chat.tools": _check_chat_tools,
    "json_schema": _check_json_schema,
    "grammar": _check_grammar,
    "add_generation_prompt": _check_prompt_changes("add_generation_prompt", False),
    "continue_final_message": _check_prompt_changes("continue_final_message", True),
    "chat_template_kwargs": _check_chat_template_kwargs,
    "logit_bias": _check_logit_bias,
    "responses.tools": _check_responses_tools,
    "responses.tool_choice": _check_responses_tool_choice,
    "responses.text": _check_text_format,
    "messages.tools": _check_anthropic_tools,
    "messages.tool_choice": _check_anthropic_tool_choice,
    "messages.output_config": _check_output_config,
    "count_tokens.tools": _check_counted_tools,
    "count_tokens.tool_choice": _check_counted_tools,
    "chat.tool_choice": _check_chat_tool_choice,
    "chat.parallel_tool_calls": _check_parallel_tool_calls,
    "chat.response_format": _check_response_format,
    "instructions": _check_instructions,
    "input": _check_prompt_changes(
        "input", "A KV cache stores keys and values for every layer and token of the prompt"
    ),
    "max_output_tokens": _check_max_tokens("max_output_tokens"),
}


@pytest.mark.parametrize(("name", "field_name"), _fields_of(fields.HONOURED))
def test_an_honoured_field_changes_the_answer_as_it_says(base_url, name, field_name):
    check = HONOURED_CHECKS.get(f"{name}.{field_name}") or HONOURED_CHECKS[field_name]
    check(_asker(base_url, ENDPOINTS[name]))


@pytest.mark.parametrize("allowed", [True, False])
def test_cors_answers_a_preflight_only_for_an_allowed_origin(base_url, allowed):
    origin = ORIGIN if allowed else "http://elsewhere.example"
    headers = {
        "origin": origin,
        "access-control-request-method": "POST",
        "access-control-request-headers": "authorization,content-type",
    }
    with httpx2.Client(base_url=base_url) as http:
        preflight = http.options("/v1/chat/completions", headers=headers)
        models = http.get("/v1/models", headers={"origin": origin})
    assert (preflight.headers.get("access-control-allow-origin") == origin) is allowed
    assert (models.headers.get("access-control-allow-origin") == origin) is allowed
    if allowed:
        assert [m["id"] for m in models.json()["data"]] == list(NAMES)
    else:  # a page from another origin is refused outright, not only left unable to read the answer
        assert models.status_code == 403


def _message_types(union: Any) -> list[type]:
    return [t for t in typing.get_args(union) if typing_extensions.is_typeddict(t)]


def _role_of(message_type: type) -> str:
    [role] = typing.get_args(typing.get_type_hints(message_type)["role"])
    return str(role)


CHAT_MESSAGE_KEYS = sorted(
    (role, key)
    for t in _message_types(chat_create_params.ChatCompletionMessageParam)
    if (role := _role_of(t)) in histories.OPENAI_MESSAGE_KEYS
    for key in typing.get_type_hints(t)
    if key not in histories.OPENAI_MESSAGE_KEYS[role]
)
"""Every key the installed openai client's Chat message types name that this backend does not honour."""
ANTHROPIC_MESSAGE_KEYS = sorted(
    key
    for t in _message_types(anthropic.types.MessageParam)
    for key in typing.get_type_hints(t)
    if key not in histories.ANTHROPIC_MESSAGE_KEYS
)
ANTHROPIC_MESSAGE_ROLES = sorted(_role_of(t) for t in _message_types(anthropic.types.MessageParam))


def _chat_message(role: str, **extra: Any) -> list[dict[str, Any]]:
    """A valid history whose last message has `role` (a tool result answers the call before it)."""
    history: list[dict[str, Any]] = [{"role": "user", "content": QUESTION}]
    if role == "tool":
        call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
        history += [
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "c1", "content": "Paris", **extra},
        ]
    elif role == "user":
        history[0].update(extra)
    else:
        history.append({"role": role, "content": "Paris.", **extra})
    return history


def test_the_keys_checked_inside_messages_are_those_the_installed_clients_name():
    assert ("assistant", "refusal") in CHAT_MESSAGE_KEYS  # a chat `name` is honoured (test_server_client_inputs)
    assert ("assistant", "function_call") in CHAT_MESSAGE_KEYS and ("assistant", "audio") in CHAT_MESSAGE_KEYS
    # A key the client names and the backend neither honours nor refuses would slip through this walk:
    # each key of each role is either honoured (used by the tool-loop tests) or refused below.
    assert ANTHROPIC_MESSAGE_KEYS == []  # Anthropic's message has only role and content; its blocks are checked
    assert ANTHROPIC_MESSAGE_ROLES == sorted(ANTHROPIC_ROLES)  # each role the client can send is served


def test_an_anthropic_system_message_among_the_turns_reaches_the_prompt(base_url):
    ask = _asker(base_url, ENDPOINTS["messages"])
    turns = [{"role": "user", "content": QUESTION}, {"role": "assistant", "content": "Paris."}]
    with_system = ask(
        messages=[*turns, {"role": "system", "content": "Answer in French."}, {"role": "user", "content": "And Spain?"}]
    )
    without = ask(messages=[*turns, {"role": "user", "content": "And Spain?"}])
    assert with_system.prompt_tokens > without.prompt_tokens


@pytest.mark.parametrize(("role", "key"), CHAT_MESSAGE_KEYS)
def test_a_chat_message_key_the_backend_cannot_honour_is_refused_naming_it(base_url, role, key):
    ask = _asker(base_url, ENDPOINTS["chat"])
    messages = _chat_message(role, **{key: "x"})
    where = f"messages[{len(messages) - 1}].{key}"
    assert _refusal(ask, messages=messages)[0::2] == (400, where)
    assert ask(messages=_chat_message(role, **{key: None})).finishes  # an explicit null is the key's absence


def test_an_unknown_key_on_an_anthropic_message_is_refused_naming_it(base_url):
    ask = _asker(base_url, ENDPOINTS["messages"])
    code, message, _ = _refusal(ask, messages=[{"role": "user", "content": QUESTION, "name": "ann"}])
    assert code == 400 and message.startswith("messages[0].name is not supported")


def test_a_chat_answer_passed_back_as_it_came_is_accepted_in_the_next_request(base_url):
    with openai.OpenAI(base_url=f"{base_url}/v1", api_key="x", max_retries=0) as client:
        first = client.chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": QUESTION}], max_tokens=8
        )
        message = first.choices[0].message  # the client's own object, as apps append it to the history
        as_hosted = {**message.model_dump(), "annotations": []}  # a hosted answer's dump has empty extras too
        for passed in (message, as_hosted):
            answer = client.chat.completions.create(
                model="tiny",
                max_tokens=8,
                messages=[{"role": "user", "content": QUESTION}, passed, {"role": "user", "content": "Again?"}],
            )
            assert answer.choices[0].finish_reason in ("stop", "length")
