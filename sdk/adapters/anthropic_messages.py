"""Messages API (`client.messages.create` / `.stream`) <-> `Call`.

`system` (a string or text blocks) is the system tier; a string is turned into one text block so a
`cache_control` breakpoint can be placed on it. Anthropic requires `max_tokens`: the cap fills it.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, Literal

from anthropic.types import (
    MessageDeltaUsage,
    RawContentBlockStopEvent,
    RawMessageDeltaEvent,
    RawMessageStopEvent,
)
from anthropic.types.raw_message_delta_event import Delta

from sdk.adapters._base import (
    Adapter,
    StreamState,
    as_items,
    first_stop,
    given_params,
    given_tiers,
    listed,
    pop_list,
    timings_of,
)
from sdk.call import Api, Call, Provider, Usage
from sdk.providers.anthropic import (
    CACHE_READ_FIELD,
    CACHE_WRITE_1H_FIELD,
    CACHE_WRITE_FIELD,
    CACHE_WRITE_SPLIT_FIELD,
)
from sdk.reasoning import Reasoning, anthropic_reasoning

_BETA_MODULES = "anthropic.types.beta"


@dataclass(frozen=True, slots=True)
class _MessagesEventTypes:
    """The classes of the events kvwise makes to end a cut stream of one API flavour."""

    block_stop: type[Any]
    message_delta: type[Any]
    delta: type[Any]
    delta_usage: type[Any]
    message_stop: type[Any]


_TYPES = _MessagesEventTypes(
    RawContentBlockStopEvent, RawMessageDeltaEvent, Delta, MessageDeltaUsage, RawMessageStopEvent
)


@functools.cache
def _beta_types() -> _MessagesEventTypes:
    """The beta API's classes (`client.beta.messages` streams `BetaRaw...Event`s, and frameworks
    match on them), imported on first need: only a beta event already in hand asks for them."""
    from anthropic.types.beta import (
        BetaMessageDeltaUsage,
        BetaRawContentBlockStopEvent,
        BetaRawMessageDeltaEvent,
        BetaRawMessageStopEvent,
    )
    from anthropic.types.beta.beta_raw_message_delta_event import Delta as BetaDelta

    return _MessagesEventTypes(
        BetaRawContentBlockStopEvent,
        BetaRawMessageDeltaEvent,
        BetaDelta,
        BetaMessageDeltaUsage,
        BetaRawMessageStopEvent,
    )


def messages_usage(usage: Any) -> Usage | None:
    """Anthropic usage -> `Usage`: input counts the uncached, cache-read and cache-written tokens."""
    if usage is None:
        return None
    read = int(getattr(usage, CACHE_READ_FIELD, None) or 0)
    write = int(getattr(usage, CACHE_WRITE_FIELD, None) or 0)
    split = getattr(usage, CACHE_WRITE_SPLIT_FIELD, None)  # the 5m/1h split of the writes (priced differently)
    return Usage(
        input_tokens=int(getattr(usage, "input_tokens", None) or 0) + read + write,
        output_tokens=int(getattr(usage, "output_tokens", None) or 0),
        cache_read_tokens=read,
        cache_write_tokens=write,
        cache_write_1h_tokens=min(int(getattr(split, CACHE_WRITE_1H_FIELD, None) or 0), write),
    )


def _merged_usage(start: Any, delta: Any) -> Usage | None:
    """`message_delta` usage is cumulative; a field it leaves out (None) keeps `message_start`'s value.

    A present 0 is a real value: every prompt token may have come from, or gone to, the cache.
    """
    if delta is None:
        return messages_usage(start)
    fields = (
        "input_tokens",
        "output_tokens",
        CACHE_READ_FIELD,
        CACHE_WRITE_FIELD,
        CACHE_WRITE_SPLIT_FIELD,
    )
    merged = {
        name: value if (value := getattr(delta, name, None)) is not None else getattr(start, name, None)
        for name in fields
    }
    return messages_usage(SimpleNamespace(**merged))


def _block_start_content(block: Any) -> str | None:
    """What a `content_block_start` delivers: nothing for an empty text or thinking block (its
    deltas carry the content), else its text, or "" for a block complete from the start
    (`tool_use` with its name, `redacted_thinking`, server tool results)."""
    kind = getattr(block, "type", None)
    if kind == "text":
        return block.text or None
    if kind == "thinking":
        return "" if block.thinking else None
    return ""


class MessagesAdapter(Adapter):
    api = Api.MESSAGES
    max_tokens_params = ("max_tokens",)
    fill_param = "max_tokens"
    requires_max_tokens = True
    stop_param = "stop_sequences"
    breakpoint_key = "cache_control"

    def to_call(self, kwargs: dict[str, Any], provider: Provider) -> Call:
        params = given_params(kwargs)
        given = given_tiers(params, "tools", "system")
        messages = pop_list(params, "messages", "messages.create", required=True)
        system = params.pop("system") if "system" in given else None
        if isinstance(system, str):
            system_blocks: list[Any] = [{"type": "text", "text": system}] if system else []
        elif system is None:
            system_blocks = []
        else:
            system_blocks = as_items(system, "system", "messages.create")
        return Call(
            api=self.api,
            provider=provider,
            model=str(params.get("model", "")),
            tools=pop_list(params, "tools", "messages.create"),
            system=system_blocks,
            messages=messages,
            params=params,
            system_was_string=isinstance(system, str),
            given=given,
        )

    def to_kwargs(self, call: Call) -> dict[str, Any]:
        kwargs = dict(call.params)
        kwargs["messages"] = call.messages
        # A string system prompt comes back a string (our own one block); one that moving volatile
        # bytes emptied is dropped. What the caller sent empty (`system=""`, `[]`) is sent as given.
        plain = call.system_was_string and len(call.system) == 1 and set(call.system[0]) == {"type", "text"}
        if plain and call.system[0]["text"]:
            kwargs["system"] = call.system[0]["text"]
        elif call.system and not plain:
            kwargs["system"] = call.system
        elif not call.system and "system" in call.given:
            kwargs["system"] = "" if call.system_was_string else []
        if call.tools or "tools" in call.given:
            kwargs["tools"] = call.tools
        return kwargs

    def reasoning(self, model: str, params: Mapping[str, Any]) -> Reasoning | None:
        return anthropic_reasoning(model, params.get("thinking"))

    def usage(self, response: Any) -> Usage | None:
        return messages_usage(getattr(response, "usage", None))

    def output_text(self, response: Any) -> str:
        return "".join(
            text for block in listed(response, "content") if isinstance(text := getattr(block, "text", None), str)
        )

    def finish_reasons(self, response: Any) -> tuple[str, ...]:
        reason = getattr(response, "stop_reason", None)
        return (reason,) if isinstance(reason, str) and reason else ()

    def read_event(self, event: Any, state: StreamState) -> str | None:
        state.last_event = event
        kind = getattr(event, "type", "")
        if kind == "content_block_delta":  # text, tool input JSON, thinking, signature, citations
            state.output_units += 1
            delta = event.delta
            if delta.type == "text_delta":
                return delta.text  # type: ignore[no-any-return]
            if delta.type == "input_json_delta" and state.tool_calls is not None and event.index in state.tool_calls:
                state.tool_calls[event.index]["arguments"] += delta.partial_json
            return ""
        if kind == "content_block_start":
            block = event.content_block
            if state.tool_calls is not None and getattr(block, "type", None) == "tool_use":
                state.tool_call(event.index).update(id=block.id, name=block.name, object_arguments=True)
            return _block_start_content(block)
        if kind == "message_start":
            state.response_id = event.message.id
            state.response_model = event.message.model
            state.last_start_usage = event.message.usage
            state.start_message = event.message
            state.usage = messages_usage(event.message.usage)
        elif kind == "message_delta":
            if event.delta.stop_reason is not None:
                state.finish_reasons.append(event.delta.stop_reason)
            state.usage = _merged_usage(state.last_start_usage, event.usage)
            state.timings = timings_of(event) or state.timings
        elif kind == "message_stop":
            state.finished = True
        return None

    def cut_events(self, state: StreamState, truncated: bool, usage: Usage | None) -> list[Any]:
        last = state.last_event
        index = getattr(last, "index", 0) or 0
        reason: Literal["max_tokens", "stop_sequence"] = "max_tokens" if truncated else "stop_sequence"
        state.finished = True
        state.finish_reasons.append(reason)
        types = _beta_types() if type(last).__module__.startswith(_BETA_MODULES) else _TYPES
        output_tokens = usage.output_tokens if usage is not None else state.output_units
        return [
            types.block_stop(index=index, type="content_block_stop"),
            types.message_delta(  # usage: the output so far; the rest stays message_start's (as the client merges it)
                delta=types.delta(stop_reason=reason, stop_sequence=None),
                type="message_delta",
                usage=types.delta_usage(output_tokens=output_tokens),
            ),
            types.message_stop(type="message_stop"),
        ]

    def truncate_text(self, response: Any, stops: tuple[str, ...]) -> bool:
        for block in listed(response, "content"):
            text = getattr(block, "text", None)
            if isinstance(text, str) and (index := first_stop(text, stops)) is not None:
                block.text = text[:index]
                response.stop_reason = "stop_sequence"
                return True
        return False
