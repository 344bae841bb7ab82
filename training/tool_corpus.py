"""Tool-use dialogues for the default model: call the weather tool when asked, answer from its result.

With `tool_choice="auto"` the server leaves the answer free (only a forced choice is constrained),
so the model itself must decide to write a `<tool_call>` block, copy the city into the arguments
and, once the result comes back in a `<tool_response>` turn, answer in one sentence that uses it.
A 3.4M-parameter model learns this only when the job is small and seen often: one tool (the
demo's), a dozen cities, one answer shape. The messages are OpenAI-shaped; `corpus` renders them
with `local_backend.model.tool_prompt.fold`, the very function the server folds a request's tools with.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from typing import Any

from local_backend.model.tool_prompt import Tool

CALL_ID = "call_0"
"""The calls' id (the prompt never shows it)."""

WEATHER_TOOL = Tool(
    "get_weather",
    "Get the current weather in a city.",
    {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)

CITIES = ("Paris", "Tokyo", "Rome", "London", "Berlin", "Madrid", "Cairo", "Oslo", "Sydney", "Toronto")
"""Cities whose first tokens differ (London and Lima both begin `Ġ`, `L` and were mixed up)."""
CONDITIONS = ("sunny", "cloudy", "rainy", "windy", "snowy", "foggy")
"""The weather a result may report: words, not numbers. The model copies a word it has seen in
both spellings (the tokenizer cuts `"sunny"` and ` sunny` differently) by memorising six pairs;
copying an arbitrary number digit by digit needs an induction circuit this model and budget do
not form (two-digit temperatures often came back wrong, even teacher-forced). The answer does
not repeat the city: trained to, the model often named the wrong one."""

WEATHER_ASKS = (
    "What is the weather in {c}?",
    "What's the weather like in {c}?",
    "How is the weather in {c} today?",
    "Weather in {c}?",
    "Tell me the weather in {c}.",
    "Is it sunny in {c}?",
)


@dataclass(frozen=True, slots=True)
class Ask:
    """One question that needs the tool: the city it names, the tool's result, the answer from it."""

    question: str
    city: str
    result: dict[str, Any]
    answer: str


def weather_ask(rng: random.Random) -> Ask:
    city, conditions = rng.choice(CITIES), rng.choice(CONDITIONS)
    return Ask(
        rng.choice(WEATHER_ASKS).format(c=city), city, {"conditions": conditions}, f"The weather there is {conditions}."
    )


NO_TOOL_ANSWER = "I cannot check the weather: no weather tool was offered."
"""The answer to a weather question asked with no tool offered: a call needs a listed tool."""


def no_tool_weather(rng: random.Random) -> list[dict[str, Any]]:
    """A weather question asked with no tools offered, and the answer that says so."""
    return [
        {"role": "user", "content": rng.choice(WEATHER_ASKS).format(c=rng.choice(CITIES))},
        {"role": "assistant", "content": NO_TOOL_ANSWER},
    ]


def tool_loop(rng: random.Random) -> list[dict[str, Any]]:
    """The OpenAI-shaped messages of one loop: question, call, result, answer."""
    ask = weather_ask(rng)
    call = {
        "id": CALL_ID,
        "type": "function",
        "function": {"name": WEATHER_TOOL.name, "arguments": json.dumps({"city": ask.city}, ensure_ascii=False)},
    }
    return [
        {"role": "user", "content": ask.question},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": CALL_ID, "content": json.dumps(ask.result, ensure_ascii=False)},
        {"role": "assistant", "content": ask.answer},
    ]
