"""What vLLM's and llama.cpp's users send, through the real clients over loopback: tool calls under
`auto` name only offered tools with valid arguments, however foreign the tools; `messages[].name`;
vLLM's `add_generation_prompt`, `continue_final_message` and `chat_template_kwargs`, each seen in
the prompt the template renders (a test checkpoint whose template shows names and a `persona`);
llama.cpp's `json_schema` and `grammar` on Chat and Completions; and each refused naming itself."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import httpx2
import jsonschema
import openai
import pytest
from jinja2.sandbox import ImmutableSandboxedEnvironment
from openai.types.chat import ChatCompletion
from tokenizers import Tokenizer

from tests.local_backend.serving import ServedEngines

PYTHON = {"type": "object", "properties": {"code": {"type": "string", "maxLength": 16}}, "required": ["code"]}
STOCK = {
    "type": "object",
    "properties": {"ticker": {"enum": ["ACME", "INITECH"]}, "days": {"type": "integer", "minimum": 1, "maximum": 30}},
    "required": ["ticker", "days"],
}
TRANSLATE = {
    "type": "object",
    "properties": {"text": {"type": "string", "maxLength": 24}, "to": {"enum": ["fr", "de"]}},
    "required": ["text", "to"],
}
TOOL_SETS = {
    "python only": {"python": PYTHON},
    "two unusual tools": {"stock_history": STOCK, "translate": TRANSLATE},
}
"""Tools the bundled model never saw (it was trained on `get_weather` alone)."""
QUESTIONS = [
    "What is the weather in Paris?",
    "Weather in Tokyo today?",
    "Is it raining in Oslo?",
    "What is prefill?",
    "Hello!",
    "Run print(1 + 1) for me.",
    "Translate 'good morning' to German.",
    "How did ACME's stock do this week?",
]
AUTO_REQUESTS = 200
AUTO_MAX_TOKENS = 96


def _tools(schemas: dict[str, dict]) -> list[dict]:
    return [{"type": "function", "function": {"name": name, "parameters": schema}} for name, schema in schemas.items()]


@pytest.fixture(scope="module")
def base_url(serve: ServedEngines) -> str:
    return serve("default", max_model_len=1024, kv_cache_memory=2**23).url


@pytest.mark.parametrize("tool_set", list(TOOL_SETS))
@pytest.mark.parametrize("tool_choice", ["auto", None], ids=["auto", "unset"])
def test_a_call_under_auto_names_an_offered_tool_with_valid_arguments(base_url, tool_set, tool_choice):
    schemas = TOOL_SETS[tool_set]
    extra = {} if tool_choice is None else {"tool_choice": tool_choice}

    async def run() -> list[ChatCompletion]:
        async with openai.AsyncOpenAI(base_url=f"{base_url}/v1", api_key="x", max_retries=0) as client:
            return list(
                await asyncio.gather(
                    *(
                        client.chat.completions.create(
                            model="tiny",
                            messages=[{"role": "user", "content": QUESTIONS[seed % len(QUESTIONS)]}],
                            tools=_tools(schemas),
                            seed=seed,
                            temperature=1.0,
                            max_tokens=AUTO_MAX_TOKENS,
                            **extra,
                        )
                        for seed in range(AUTO_REQUESTS // 4)
                    )
                )
            )

    validated = 0
    for answer in asyncio.run(run()):
        [choice] = answer.choices
        calls = choice.message.tool_calls or []
        assert {call.function.name for call in calls} <= set(schemas)
        cut = answer.usage.completion_tokens == AUTO_MAX_TOKENS  # then its last call may be unfinished
        finished = calls[:-1] if cut else calls
        assert choice.finish_reason == ("tool_calls" if calls else "stop" if not cut else "length")
        for call in finished:
            jsonschema.validate(json.loads(call.function.arguments), schemas[call.function.name])
        validated += len(finished)
    assert validated > 0  # the model did call: the weather questions lead it to


def test_a_streamed_answer_under_auto_makes_the_same_offered_calls_as_the_whole_one(base_url):
    called = 0
    with openai.OpenAI(base_url=f"{base_url}/v1", api_key="x", max_retries=0) as client:
        for seed in range(4):
            request = {
                "model": "tiny",
                "messages": [{"role": "user", "content": QUESTIONS[seed]}],
                "seed": seed,
                "tools": _tools({"python": PYTHON}),
                "temperature": 1.0,
                "max_tokens": AUTO_MAX_TOKENS,
            }
            whole = client.chat.completions.create(**request).choices[0].message.tool_calls or []
            streamed: dict[int, list[str]] = {}
            for chunk in client.chat.completions.create(stream=True, **request):
                for call in chunk.choices[0].delta.tool_calls or () if chunk.choices else ():
                    streamed.setdefault(call.index, ["", ""])
                    streamed[call.index][0] += call.function.name or ""
                    streamed[call.index][1] += call.function.arguments or ""
            assert [tuple(streamed[i]) for i in sorted(streamed)] == [
                (c.function.name, c.function.arguments) for c in whole
            ]
            assert all(name == "python" for name, _ in streamed.values())
            called += len(whole)
    assert called > 0


TEMPLATE = (
    "{{ bos_token }}{% if persona is defined %}<|im_start|>persona {{ persona + '.' }}<|im_end|>\n{% endif %}"
    "{% for m in messages %}<|im_start|>{{ m['role'] }}{% if m.name %} {{ m.name }}{% endif %}\n"
    "{{ m['content'] }}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
"""A chat template that shows each message's `name` and a `persona` variable when it is given."""
HISTORY = [
    {"role": "system", "content": "Be brief.", "name": "ops"},
    {"role": "user", "content": "Hello world!", "name": "ann"},
    {"role": "assistant", "content": "The quick brown", "name": "bot"},
]
GREEDY = {"model": "tiny", "max_tokens": 6, "temperature": 0, "ignore_eos": True}


@pytest.fixture(scope="module")
def template_url(serve: ServedEngines, llama_dir: Path) -> str:
    return serve(llama_dir, chat_template=TEMPLATE, max_model_len=256, kv_cache_memory=2**20).url


@pytest.fixture(scope="module")
def rendered(llama_dir: Path):
    """The token ids of `TEMPLATE` rendered by hand, as the server should render it, cut after the final
    message's content for `continue_final_message` (transformers' rule)."""
    template = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True).from_string(TEMPLATE)
    tokenizer = Tokenizer.from_file(str(llama_dir / "tokenizer.json"))

    def render(
        messages: list[dict], add_generation_prompt: bool = True, continued: bool = False, **kwargs: Any
    ) -> list[int]:
        text = template.render(
            messages=messages, add_generation_prompt=add_generation_prompt, bos_token="<s>", eos_token="</s>", **kwargs
        )
        if continued:
            final = messages[-1]["content"]
            text = text[: text.rindex(final) + len(final)]
        return tokenizer.encode(text, add_special_tokens=False).ids

    return render


def _post(url: str, path: str, body: dict[str, Any]) -> httpx2.Response:
    with httpx2.Client(base_url=url, timeout=60) as http:
        return http.post(path, json=body)


def _chat(url: str, **body: Any) -> dict[str, Any]:
    response = _post(url, "/v1/chat/completions", {**GREEDY, **body})
    assert response.status_code == 200, response.text
    return response.json()


def _refused(url: str, path: str, **body: Any) -> tuple[str, str]:
    """The param and message of a 400 for `body`."""
    response = _post(url, path, {**GREEDY, **body})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    return error["param"], error["message"]


def _prompt_is(url: str, ids: list[int], **chat: Any) -> None:
    """The chat request's prompt is `ids`: its count, and the same greedy answer as a completion of them."""
    answer = _chat(url, **chat)
    completed = _post(url, "/v1/completions", {**GREEDY, "prompt": ids}).json()
    assert answer["usage"]["prompt_tokens"] == len(ids)
    assert answer["choices"][0]["message"]["content"] == completed["choices"][0]["text"]


def test_a_message_name_reaches_the_template_as_part_of_the_message(template_url, rendered):
    _prompt_is(template_url, rendered(HISTORY), messages=HISTORY)
    unnamed = [{k: v for k, v in m.items() if k != "name"} for m in HISTORY]
    assert rendered(unnamed) != rendered(HISTORY)
    _prompt_is(template_url, rendered(unnamed), messages=unnamed)
    param, _ = _refused(template_url, "/v1/chat/completions", messages=[{"role": "user", "content": "Hi", "name": 7}])
    assert param == "messages[0].name"


def test_a_message_name_is_accepted_with_tools_offered_to_the_bundled_model(base_url):
    named = [
        {"role": "system", "content": "Be brief.", "name": "ops"},
        {"role": "user", "content": "Hello!", "name": "ann"},
    ]
    answer = _chat(base_url, messages=named, tools=_tools({"python": PYTHON}))
    assert answer["choices"][0]["finish_reason"] in ("stop", "length", "tool_calls")


def test_add_generation_prompt_false_leaves_the_assistant_opening_out(template_url, rendered):
    _prompt_is(
        template_url,
        rendered(HISTORY[:2], add_generation_prompt=False),
        messages=HISTORY[:2],
        add_generation_prompt=False,
    )
    assert len(rendered(HISTORY[:2], add_generation_prompt=False)) < len(rendered(HISTORY[:2]))


def test_continue_final_message_continues_the_last_assistant_message(template_url, rendered):
    ids = rendered(HISTORY, add_generation_prompt=False, continued=True)
    _prompt_is(template_url, ids, messages=HISTORY, continue_final_message=True)
    _prompt_is(template_url, ids, messages=HISTORY, continue_final_message=True, add_generation_prompt=False)
    assert ids != rendered(HISTORY, add_generation_prompt=False)  # no end of turn after the assistant's text


def test_continue_final_message_with_add_generation_prompt_is_refused_as_vllm_refuses_it(template_url):
    param, message = _refused(
        template_url, "/v1/chat/completions", messages=HISTORY, continue_final_message=True, add_generation_prompt=True
    )
    assert param == "continue_final_message"
    assert message == "Cannot set both `continue_final_message` and `add_generation_prompt` to True."
    empty = [*HISTORY[:2], {"role": "assistant", "content": ""}]
    assert _refused(template_url, "/v1/chat/completions", messages=empty, continue_final_message=True)[0] == (
        "continue_final_message"
    )


def test_chat_template_kwargs_reach_the_template(template_url, rendered):
    ids = rendered(HISTORY[:2], persona="pirate")
    assert ids != rendered(HISTORY[:2])
    _prompt_is(template_url, ids, messages=HISTORY[:2], chat_template_kwargs={"persona": "pirate"})
    param, _ = _refused(
        template_url, "/v1/chat/completions", messages=HISTORY[:2], chat_template_kwargs={"persona": {"a": 1}}
    )  # the template's `+` cannot add a dict to text
    assert param == "messages"


@pytest.mark.parametrize(
    "value", [["persona"], "persona=pirate", {"messages": []}, {"add_generation_prompt": False}, {"raise_exception": 1}]
)
def test_chat_template_kwargs_not_an_object_of_free_names_is_refused_naming_it(template_url, value):
    param, _ = _refused(template_url, "/v1/chat/completions", messages=HISTORY[:2], chat_template_kwargs=value)
    assert param == "chat_template_kwargs"


ANSWER = {
    "type": "object",
    "properties": {"answer": {"enum": ["yes", "no"]}, "sure": {"type": "boolean"}},
    "required": ["answer", "sure"],
}
YES_NO = 'root ::= ("yes" | "no") "." [ ]? [a-z]{0,3}'
ENDPOINT_BODIES = {
    "/v1/chat/completions": {"messages": [{"role": "user", "content": "Is the sky blue? Answer in JSON."}]},
    "/v1/completions": {"prompt": "Is the sky blue?"},
}


def _text(path: str, body: dict[str, Any]) -> str:
    [choice] = body["choices"]
    return choice["message"]["content"] if "message" in choice else choice["text"]


@pytest.mark.parametrize("path", list(ENDPOINT_BODIES))
def test_llama_cpp_json_schema_holds_the_answer_to_the_schema(base_url, path):
    for seed in range(3):
        body = {**ENDPOINT_BODIES[path], "model": "tiny", "max_tokens": 40, "seed": seed, "temperature": 1.0}
        free = _post(base_url, path, body).json()
        held = _post(base_url, path, {**body, "json_schema": ANSWER}).json()
        jsonschema.validate(json.loads(_text(path, held)), ANSWER)
        assert _text(path, free) != _text(path, held)


@pytest.mark.parametrize("path", list(ENDPOINT_BODIES))
def test_llama_cpp_grammar_holds_the_answer_to_the_gbnf(base_url, path):
    for seed in range(3):
        body = {**ENDPOINT_BODIES[path], "model": "tiny", "max_tokens": 40, "seed": seed, "temperature": 1.0}
        assert re.fullmatch(
            r"(yes|no)\. ?[a-z]{0,3}", _text(path, _post(base_url, path, {**body, "grammar": YES_NO}).json())
        )


@pytest.mark.parametrize(
    ("path", "extra", "param"),
    [
        ("/v1/chat/completions", {"json_schema": ANSWER, "response_format": {"type": "json_object"}}, "json_schema"),
        ("/v1/chat/completions", {"grammar": YES_NO, "response_format": {"type": "json_object"}}, "grammar"),
        ("/v1/chat/completions", {"grammar": YES_NO, "tools": _tools({"python": PYTHON})}, "grammar"),
        *(
            (path, extra, param)
            for path in ENDPOINT_BODIES
            for extra, param in [
                ({"grammar": YES_NO, "json_schema": ANSWER}, "grammar"),
                ({"grammar": "root ::= ("}, "grammar"),
                ({"grammar": "root ::= answer"}, "grammar"),
                ({"grammar": 'start: "a" | ('}, "grammar"),
                ({"grammar": ""}, "grammar"),
                ({"grammar": ['root ::= "a"']}, "grammar"),
                ({"json_schema": "object"}, "json_schema"),
                ({"json_schema": {"type": "object", "properties": {"x": {"type": "nonsense"}}}}, "json_schema"),
            ]
        ),
    ],
)
def test_a_grammar_or_schema_that_cannot_hold_the_answer_is_refused_naming_it(base_url, path, extra, param):
    assert _refused(base_url, path, **ENDPOINT_BODIES[path], **extra)[0] == param


def test_under_auto_with_a_json_schema_the_answer_is_that_json_or_an_offered_call(base_url):
    kinds = set()
    for seed in range(6):
        question = ["Is the sky blue? Answer in JSON.", "What colour is the sky?"][seed % 2]
        answer = _chat(
            base_url,
            messages=[{"role": "user", "content": question}],
            seed=seed,
            temperature=1.0,
            ignore_eos=False,
            max_tokens=96,
            tools=_tools({"python": PYTHON}),
            json_schema=ANSWER,
        )
        [choice] = answer["choices"]
        kinds.add(choice["finish_reason"])
        if choice["finish_reason"] == "tool_calls":
            assert [call["function"]["name"] for call in choice["message"]["tool_calls"]] == ["python"]
        else:
            jsonschema.validate(json.loads(choice["message"]["content"]), ANSWER)
    assert kinds == {"tool_calls", "stop"}
