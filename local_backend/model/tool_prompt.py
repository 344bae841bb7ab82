"""Tools, past calls and their results as chat text, for a template that does not render tools.

The Hermes format (Hermes and Qwen 2.5+, read by vLLM's `hermes` parser): the tool list and the
instruction to answer a call as

    <tool_call>
    {"name": "get_weather", "arguments": {"city": "Paris"}}
    </tool_call>

go into the system turn, each past call is its `<tool_call>` text in the assistant turn, and each
result is a user turn `<tool_response>\\n...\\n</tool_response>` (consecutive results share one).

This module has no dependencies beyond the standard library, so the server's prompt
(`server.tools.prompt_ids`) and the bundled model's training text (`training.corpus`) are written by
the same functions and cannot drift apart.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

TOOL_CALL_START: Final = "<tool_call>"
TOOL_CALL_END: Final = "</tool_call>"
"""The Hermes tool-call tags the model is asked to write its calls between."""

TOOL_RESPONSE_START: Final = "<tool_response>"
TOOL_RESPONSE_END: Final = "</tool_response>"
"""The tags around a tool's result, in the user turn that carries it back."""

TOOLS_PREAMBLE: Final = (
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
)
TOOLS_POSTAMBLE: Final = (
    "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
    '<tool_call></tool_call> XML tags:\n<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n'
    "</tool_call>"
)


@dataclass(frozen=True, slots=True)
class Tool:
    """A function the model may call: its name, description and JSON schema of its arguments."""

    name: str
    description: str | None
    parameters: Mapping[str, Any]

    def as_openai(self) -> dict[str, Any]:
        function = {"name": self.name, "parameters": dict(self.parameters)}
        if self.description:
            function["description"] = self.description
        return {"type": "function", "function": function}


def call_text(name: str, arguments: Any) -> str:
    """A call as the model is asked to write it (`arguments` a JSON object, or its text)."""
    args = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
    return (
        f'{TOOL_CALL_START}\n{{"name": {json.dumps(name, ensure_ascii=False)}, "arguments": {args}}}\n{TOOL_CALL_END}'
    )


def response_text(content: str) -> str:
    """A tool's result as the user turn that carries it back shows it."""
    return f"{TOOL_RESPONSE_START}\n{content}\n{TOOL_RESPONSE_END}"


def tools_system(tools: Sequence[Tool], system: str | None = None) -> str:
    """The system turn offering `tools`: the caller's `system` text first, then the listing and the instruction."""
    listing = "\n".join(json.dumps(t.as_openai(), ensure_ascii=False) for t in tools)
    text = TOOLS_PREAMBLE + listing + TOOLS_POSTAMBLE
    return text if system is None else system + "\n\n" + text


def fold(messages: Sequence[Mapping[str, Any]], tools: Sequence[Tool]) -> list[dict[str, str]]:
    """OpenAI-shaped `messages` (tool calls and `tool` results included) as system, user and assistant turns
    (each keeps its `name`)."""
    turns: list[dict[str, str]] = []
    if tools:
        system, named = None, {}
        if messages and messages[0]["role"] == "system":
            system, named, messages = messages[0]["content"], _named(messages[0]), messages[1:]
        turns.append({"role": "system", "content": tools_system(tools, system), **named})
    for message in messages:
        role, content = message["role"], message.get("content") or ""
        if role == "tool":
            response = response_text(content)
            if turns and turns[-1]["role"] == "user" and turns[-1]["content"].endswith(TOOL_RESPONSE_END):
                turns[-1]["content"] += "\n" + response  # consecutive results: one user turn, as Qwen's template
            else:
                turns.append({"role": "user", "content": response})
            continue
        calls = [call_text(c["function"]["name"], c["function"]["arguments"]) for c in message.get("tool_calls") or ()]
        turns.append({"role": role, "content": "\n".join(filter(None, [content, *calls])), **_named(message)})
    return turns


def _named(message: Mapping[str, Any]) -> dict[str, str]:
    """The message's `name` (a participant's), kept for the template, or nothing."""
    return {"name": message["name"]} if message.get("name") else {}
