"""The simulator with a per-request script, so a framework's own agent loop meets a real tool loop.

What each answer is follows from the request alone (never from how many requests came before), so
the bare and the wrapped runs of one test meet the same script whatever kvwise rewrites:
- a request that forces a tool (`tool_choice` naming one, or `required` / `any`) gets a call of it
  whose arguments are `STRUCTURED_REPLY`: how frameworks ask for structured output through tools;
- a request that offers `WEATHER_TOOL_NAME` and carries fewer than `TOOL_ROUNDS` tool results gets
  one more call of it, for the next city of `CITIES`;
- a request that asks for a JSON schema (`response_format`, Responses `text.format`) gets
  `STRUCTURED_REPLY` as its text;
- anything else gets `FINAL_REPLY`.
"""

from __future__ import annotations

import json
from typing import Any, Final

from pydantic import BaseModel

from tests.simulator.server import Exchange
from tests.simulator.simulator import ProviderSimulator

WEATHER_TOOL_NAME: Final = "get_weather"
CITIES: Final = ("Paris", "Oslo", "Rome")
TOOL_ROUNDS: Final = 2
"""Tool calls before the final answer: a loop of `TOOL_ROUNDS + 1` model calls."""
WEATHER: Final = {"Paris": "rainy", "Oslo": "snowy", "Rome": "sunny"}
FINAL_REPLY: Final = "It is rainy in Paris and snowy in Oslo."
STRUCTURED: Final = {"city": "Paris", "conditions": "rainy"}
STRUCTURED_REPLY: Final = json.dumps(STRUCTURED)


class Weather(BaseModel):
    """The structured output the frameworks ask for: `STRUCTURED` parses to it."""

    city: str
    conditions: str


def weather(city: str) -> str:
    """The tool every framework's loop runs: a canned reading per city."""
    return WEATHER.get(city, "cloudy")


class ScriptedSimulator(ProviderSimulator):
    """`ProviderSimulator` whose `reply` and `tool_call` are chosen per request (module docstring)."""

    def _handle(self, exchange: Exchange) -> None:
        try:
            body = json.loads(exchange.raw) if exchange.raw else None
        except ValueError:
            body = None
        if exchange.method == "POST" and isinstance(body, dict):
            self.tool_call, self.reply = _answer(body)
        super()._handle(exchange)


def _answer(body: dict[str, Any]) -> tuple[str | None, str]:
    tools = [_tool_name(tool) for tool in body.get("tools") or []]
    if (forced := _forced_tool(body.get("tool_choice"), tools)) is not None:
        return forced, STRUCTURED_REPLY
    rounds = _tool_results(body)
    if WEATHER_TOOL_NAME in tools and rounds < TOOL_ROUNDS:
        return WEATHER_TOOL_NAME, json.dumps({"city": CITIES[rounds]})
    if body.get("response_format") or (body.get("text") or {}).get("format"):
        return None, STRUCTURED_REPLY
    return None, FINAL_REPLY


def _tool_name(tool: dict[str, Any]) -> str:
    return str((tool.get("function") or tool).get("name", ""))


def _forced_tool(choice: Any, tools: list[str]) -> str | None:
    if isinstance(choice, str):
        return tools[0] if choice == "required" and tools else None
    if not isinstance(choice, dict):
        return None
    if choice.get("type") == "any" and tools:
        return tools[0]
    name = (choice.get("function") or {}).get("name") or (
        choice.get("name") if choice.get("type") in ("tool", "function") else None
    )
    return str(name) if name else None


def _tool_results(body: dict[str, Any]) -> int:
    """Tool results the request carries: Chat `tool` messages, Messages `tool_result` blocks,
    Responses `function_call_output` items."""
    count = 0
    for message in [*(body.get("messages") or []), *(body["input"] if isinstance(body.get("input"), list) else [])]:
        if message.get("role") == "tool" or message.get("type") == "function_call_output":
            count += 1
        content = message.get("content")
        if isinstance(content, list):
            count += sum(1 for part in content if isinstance(part, dict) and part.get("type") == "tool_result")
    return count
