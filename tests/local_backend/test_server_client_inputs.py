"""What vLLM's and llama.cpp's users send, through the real clients against the bundled model: tool
calls under `auto` name only offered tools with valid arguments, however foreign the tools."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator

import jsonschema
import openai
import pytest
from openai.types.chat import ChatCompletion

from tests.local_backend.serving import ServedEngines

PYTHON = {"type": "object", "properties": {"code": {"type": "string", "maxLength": 16}}, "required": ["code"]}
STOCK = {"type": "object", "properties": {"ticker": {"enum": ["ACME", "INITECH"]},
         "days": {"type": "integer", "minimum": 1, "maximum": 30}}, "required": ["ticker", "days"]}  # fmt: skip
TRANSLATE = {"type": "object", "properties": {"text": {"type": "string", "maxLength": 24},
             "to": {"enum": ["fr", "de"]}}, "required": ["text", "to"]}  # fmt: skip
TOOL_SETS = {
    "python only": {"python": PYTHON},
    "two unusual tools": {"stock_history": STOCK, "translate": TRANSLATE},
}
"""Tools the bundled model never saw (it was trained on `get_weather` alone)."""
QUESTIONS = [
    "What is the weather in Paris?", "Weather in Tokyo today?", "Is it raining in Oslo?", "What is prefill?", "Hello!",
    "Run print(1 + 1) for me.", "Translate 'good morning' to German.", "How did ACME's stock do this week?",
]  # fmt: skip
AUTO_REQUESTS = 200


def _tools(schemas: dict[str, dict]) -> list[dict]:
    return [{"type": "function", "function": {"name": name, "parameters": schema}} for name, schema in schemas.items()]


@pytest.fixture(scope="module")
def base_url(serve: ServedEngines) -> str:
    return serve("default", max_model_len=1024, kv_cache_memory=2**23).url


@pytest.fixture(scope="module")
def client(base_url: str) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=f"{base_url}/v1", api_key="x", max_retries=0) as client:
        yield client


@pytest.mark.parametrize("tool_set", list(TOOL_SETS))
@pytest.mark.parametrize("tool_choice", ["auto", None], ids=["auto", "unset"])
def test_a_call_under_auto_names_an_offered_tool_with_valid_arguments(base_url, tool_set, tool_choice):
    schemas = TOOL_SETS[tool_set]
    extra = {} if tool_choice is None else {"tool_choice": tool_choice}

    async def run() -> list[ChatCompletion]:
        async with openai.AsyncOpenAI(base_url=f"{base_url}/v1", api_key="x", max_retries=0) as client:
            return list(await asyncio.gather(*(
                client.chat.completions.create(
                    model="tiny", messages=[{"role": "user", "content": QUESTIONS[seed % len(QUESTIONS)]}],
                    tools=_tools(schemas), seed=seed, temperature=1.0, max_tokens=96, **extra)
                for seed in range(AUTO_REQUESTS // 4))))  # fmt: skip

    validated = 0
    for answer in asyncio.run(run()):
        [choice] = answer.choices
        calls = choice.message.tool_calls or []
        assert {call.function.name for call in calls} <= set(schemas)
        finished = calls if choice.finish_reason != "length" else calls[:-1]  # a cut answer's last call may be unfinished
        assert choice.finish_reason == ("tool_calls" if finished else choice.finish_reason)
        for call in finished:
            jsonschema.validate(json.loads(call.function.arguments), schemas[call.function.name])
        validated += len(finished)
    assert validated > 0  # the model did call: the weather questions lead it to
