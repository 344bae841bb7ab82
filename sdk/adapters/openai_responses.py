"""Responses API (`client.responses.create`, `client.beta.responses.create`) <-> `Call`.

The beta API answers with its own types (`BetaResponse`, `BetaResponseCompletedEvent`, ...), of the
same shape: both are read, and the events kvwise makes (a cut) are of the stream's own kind.

`instructions` (held as a pseudo-item with role "instructions") and leading system/developer input
items form the system tier. The API takes no
stop sequences, so the policy's are enforced client-side (`Call.client_stops`).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from openai.types.responses import (
    Response,
    ResponseCompletedEvent,
    ResponseIncompleteEvent,
    ResponseOutputMessage,
    ResponseOutputText,
    ResponseUsage,
)
from openai.types.responses.response import IncompleteDetails

from sdk.adapters._base import (
    Adapter,
    StreamState,
    count_leading_system,
    detail_tokens,
    first_stop,
    given_params,
    given_tiers,
    listed,
    pop_list,
    timings_of,
)
from sdk.call import Api, Call, Provider, Usage
from sdk.providers.openai import CACHE_READ_FIELD, CACHE_WRITE_FIELD
from sdk.reasoning import Reasoning, openai_reasoning

_BETA_MODULES = "openai.types.beta"
_FINAL_EVENTS = ("response.completed", "response.incomplete", "response.failed")
_INSTRUCTIONS = "instructions"
_ITEMS_WITH_DELTAS = frozenset({"message", "function_call"})
"""Output items whose content comes in deltas right behind `output_item.added`; any other item
(reasoning, a tool's own call) counts as content from its start, as it can take long to finish."""


def responses_usage(usage: Any) -> Usage | None:
    """`ResponseUsage` -> `Usage` (input_tokens already include the cached ones)."""
    if usage is None:
        return None
    details = getattr(usage, "input_tokens_details", None)
    out_details = getattr(usage, "output_tokens_details", None)
    return Usage(
        input_tokens=usage.input_tokens or 0,
        output_tokens=usage.output_tokens or 0,
        cache_read_tokens=detail_tokens(details, CACHE_READ_FIELD),
        cache_write_tokens=detail_tokens(details, CACHE_WRITE_FIELD),
        reasoning_tokens=detail_tokens(out_details, "reasoning_tokens"),
    )


@dataclass(frozen=True, slots=True)
class _ResponsesTypes:
    """The classes of the events and objects kvwise makes for a cut stream of one API flavour."""

    response: type[Any]
    message: type[Any]
    text: type[Any]
    incomplete: type[Any]
    completed_event: type[Any]
    incomplete_event: type[Any]
    usage: type[Any]


_TYPES = _ResponsesTypes(
    Response,
    ResponseOutputMessage,
    ResponseOutputText,
    IncompleteDetails,
    ResponseCompletedEvent,
    ResponseIncompleteEvent,
    ResponseUsage,
)


def _is_beta(value: Any) -> bool:
    """Whether `value` is one of the beta API's objects (its class lives under `openai.types.beta`)."""
    return type(value).__module__.startswith(_BETA_MODULES)


@functools.cache
def _beta_types() -> _ResponsesTypes:
    """The beta API's classes, imported on first need: `openai.types.beta` is hundreds of modules, an
    import a process that never calls `client.beta` should not pay for on its first call (its size and
    time: docs/benchmarks.md, `by_hand`). Only a beta object already in hand asks for them, so by then
    the modules are loaded."""
    from openai.types.beta import (
        BetaResponse,
        BetaResponseCompletedEvent,
        BetaResponseIncompleteEvent,
        BetaResponseOutputMessage,
        BetaResponseOutputText,
        BetaResponseUsage,
    )
    from openai.types.beta.beta_response import IncompleteDetails as BetaIncompleteDetails

    return _ResponsesTypes(
        BetaResponse,
        BetaResponseOutputMessage,
        BetaResponseOutputText,
        BetaIncompleteDetails,
        BetaResponseCompletedEvent,
        BetaResponseIncompleteEvent,
        BetaResponseUsage,
    )


def _response_of(value: Any) -> Any:
    """`value` if it is a `Response` or `BetaResponse`, else None."""
    if isinstance(value, Response) or (_is_beta(value) and isinstance(value, _beta_types().response)):
        return value
    return None


class ResponsesAdapter(Adapter):
    api = Api.RESPONSES
    text_part_type = "input_text"
    max_tokens_params = ("max_output_tokens",)
    fill_param = "max_output_tokens"
    stop_param = None
    breakpoint_key = "prompt_cache_breakpoint"

    def to_call(self, kwargs: dict[str, Any], provider: Provider) -> Call:
        params = given_params(kwargs)
        given = given_tiers(params, "tools", "input")
        raw_input = params.pop("input") if "input" in given else []
        if isinstance(raw_input, str):
            items: list[Any] = [{"role": "user", "content": raw_input}]
        elif isinstance(raw_input, (list, tuple)):
            items = list(raw_input)
        else:
            raise TypeError(
                f"responses.create: input must be a string or a list of items, got {type(raw_input).__name__}"
            )
        split = count_leading_system(items)
        system = items[:split]
        if isinstance(params.get(_INSTRUCTIONS), str):
            system.insert(0, {"role": _INSTRUCTIONS, "content": params.pop(_INSTRUCTIONS)})
        return Call(
            api=self.api,
            provider=provider,
            model=str(params.get("model", "")),
            tools=pop_list(params, "tools", "responses.create"),
            system=system,
            messages=items[split:],
            params=params,
            system_was_string=isinstance(raw_input, str),
            given=given,
        )

    def to_kwargs(self, call: Call) -> dict[str, Any]:
        kwargs = dict(call.params)
        system = list(call.system)
        if system and isinstance(system[0], dict) and system[0].get("role") == _INSTRUCTIONS:
            kwargs[_INSTRUCTIONS] = system.pop(0)["content"]
        items = [*system, *call.messages]
        single = items[0] if len(items) == 1 else None
        if call.system_was_string and single is not None and isinstance(single.get("content"), str):
            kwargs["input"] = single["content"]
        elif items or "input" in call.given:  # no `input` (a `previous_response_id` or `prompt` call) stays absent
            kwargs["input"] = items
        if call.tools or "tools" in call.given:
            kwargs["tools"] = call.tools
        return kwargs

    def reasoning(self, model: str, params: Mapping[str, Any]) -> Reasoning | None:
        config = params.get("reasoning")
        return openai_reasoning(model, config.get("effort") if isinstance(config, Mapping) else None)

    def usage(self, response: Any) -> Usage | None:
        return responses_usage(getattr(response, "usage", None))

    def output_text(self, response: Any) -> str:
        return "".join(  # (`BetaResponse` has no `output_text` property: the same join of its text parts)
            part.text
            for item in listed(response, "output")
            if getattr(item, "type", None) == "message"
            for part in listed(item, "content")
            if getattr(part, "type", None) == "output_text" and isinstance(part.text, str)
        )

    def finish_reasons(self, response: Any) -> tuple[str, ...]:
        status = getattr(response, "status", None)
        return (status,) if isinstance(status, str) and status else ()

    def read_event(self, event: Any, state: StreamState) -> str | None:
        state.last_event = event
        kind = getattr(event, "type", "")
        if kind == "response.output_text.delta":
            state.output_units += 1
            return event.delta or ""
        if kind.endswith(".delta"):  # refusal, function and tool arguments, reasoning, audio
            state.output_units += 1
            if kind == "response.function_call_arguments.delta" and state.tool_calls is not None:
                state.tool_call(event.output_index)["arguments"] += event.delta
            return ""
        if kind == "response.output_item.added":  # a message or a call is a header: its deltas follow at once
            item_type = getattr(event.item, "type", None)
            if item_type == "function_call" and state.tool_calls is not None:
                state.tool_call(event.output_index).update(id=event.item.call_id, name=event.item.name)
            return None if item_type in _ITEMS_WITH_DELTAS else ""
        response = _response_of(getattr(event, "response", None))
        if response is not None:
            state.response_id = response.id
            state.response_model = response.model
            state.timings = timings_of(response) or state.timings
            if kind in _FINAL_EVENTS:
                state.finished = True
                state.usage = responses_usage(response.usage)
                state.finish_reasons.append(response.status or kind.removeprefix("response."))
        return None

    def cut_events(self, state: StreamState, truncated: bool, usage: Usage | None) -> list[Any]:
        base = _response_of(getattr(state.last_event, "response", None))
        types = _beta_types() if _is_beta(base) or _is_beta(state.last_event) else _TYPES
        text = "".join(state.text)
        message = types.message(
            id=f"msg_{state.response_id or 'kvwise'}",
            content=[types.text(annotations=[], text=text, type="output_text")],
            role="assistant",
            status="incomplete" if truncated else "completed",
            type="message",
        )
        status = "incomplete" if truncated else "completed"
        update: dict[str, Any] = {"status": status, "output": [message]}
        if truncated:
            update["incomplete_details"] = types.incomplete(reason="max_output_tokens")
        if usage is not None:  # the final event's response always carries the usage
            update["usage"] = types.usage.model_validate(
                {
                    "input_tokens": usage.input_tokens,
                    "input_tokens_details": {
                        CACHE_READ_FIELD: usage.cache_read_tokens,
                        CACHE_WRITE_FIELD: usage.cache_write_tokens,
                    },
                    "output_tokens": usage.output_tokens,
                    "output_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
                    "total_tokens": usage.input_tokens + usage.output_tokens,
                }
            )
        response = (
            base.model_copy(update=update)
            if base is not None
            else types.response.model_construct(
                id=state.response_id or "",
                model=state.response_model or "",
                object="response",
                output=[message],
                **{k: v for k, v in update.items() if k != "output"},
            )
        )
        sequence = int(getattr(state.last_event, "sequence_number", 0) or 0) + 1
        state.finished = True
        state.finish_reasons.append(status)
        if truncated:
            return [types.incomplete_event(response=response, sequence_number=sequence, type="response.incomplete")]
        return [types.completed_event(response=response, sequence_number=sequence, type="response.completed")]

    def set_event_text(self, event: Any, text: str) -> None:
        event.delta = text

    def truncate_text(self, response: Any, stops: tuple[str, ...]) -> bool:
        for item in listed(response, "output"):
            for part in listed(item, "content"):
                text = getattr(part, "text", None)
                if text and (index := first_stop(text, stops)) is not None:
                    part.text = text[:index]
                    return True
        return False
