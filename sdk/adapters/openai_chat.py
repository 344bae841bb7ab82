"""Chat Completions (`client.chat.completions.create`) <-> `Call`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from openai.types import CompletionUsage
from openai.types.chat import ChatCompletionChunk
from openai.types.chat.chat_completion_chunk import Choice, ChoiceDelta

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
from sdk.call import STREAM_USAGE_REQUESTED, Api, Call, Provider, Usage
from sdk.providers.openai import CACHE_READ_FIELD, CACHE_WRITE_FIELD
from sdk.reasoning import Reasoning, openai_reasoning

CutReason = Literal["length", "stop"]


def cut_envelope(state: StreamState, truncated: bool, object_name: str) -> tuple[CutReason, dict[str, Any]]:
    """The finish reason of a stream kvwise cuts, recorded on `state`, and the fields its closing
    events repeat from the stream's (Chat and Completions chunks share them)."""
    last = state.last_event
    reason: CutReason = "length" if truncated else "stop"
    state.finished = True
    state.finish_reasons.append(reason)
    envelope = {
        "id": state.response_id or "",
        "created": last.created if last is not None else 0,
        "model": state.response_model or "",
        "object": object_name,
    }
    return reason, envelope


def chat_usage(usage: Any) -> Usage | None:
    """`CompletionUsage` -> `Usage` (prompt_tokens already include the cached ones)."""
    if usage is None:
        return None
    prompt_details = getattr(usage, "prompt_tokens_details", None)
    completion_details = getattr(usage, "completion_tokens_details", None)
    return Usage(
        input_tokens=usage.prompt_tokens or 0,
        output_tokens=usage.completion_tokens or 0,
        cache_read_tokens=detail_tokens(prompt_details, CACHE_READ_FIELD),
        cache_write_tokens=detail_tokens(prompt_details, CACHE_WRITE_FIELD),
        reasoning_tokens=detail_tokens(completion_details, "reasoning_tokens"),
    )


def completion_usage(usage: Usage) -> CompletionUsage:
    """`Usage` -> the `CompletionUsage` of a usage chunk kvwise makes (the inverse of `chat_usage`)."""
    return CompletionUsage.model_validate(
        {
            "prompt_tokens": usage.input_tokens,
            "completion_tokens": usage.output_tokens,
            "total_tokens": usage.input_tokens + usage.output_tokens,
            "prompt_tokens_details": {CACHE_READ_FIELD: usage.cache_read_tokens},
            "completion_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
        }
    )


def choice_finish_reasons(response: Any) -> tuple[str, ...]:
    """Why each choice of a non-streamed Chat or Completions answer ended (none where the body had
    no `choices`)."""
    reasons = [getattr(choice, "finish_reason", None) for choice in listed(response, "choices")]
    return tuple([reason for reason in reasons if isinstance(reason, str) and reason])


def caller_asks_usage(call: Call) -> bool:
    """Whether the caller's own `stream_options` (named, or the one in `extra_body` that the client
    merges over it) ask a streamed call for its usage chunk."""
    if not call.stream:
        return False
    extra = call.params.get("extra_body")
    options = call.params.get("stream_options")
    if isinstance(extra, Mapping) and "stream_options" in extra:  # what the client sends: merged over the named one
        options = extra["stream_options"]
    return isinstance(options, Mapping) and options.get("include_usage") is True


def stream_usage_options(call: Call) -> dict[str, Any] | None:
    """The `stream_options` a streamed call is sent with when the caller did not ask for usage:
    theirs plus `include_usage`, so the server reports usage (and cache reads) on every stream.
    None when the call is not streamed, the caller asked for usage themselves, or the server
    refuses `stream_options`. A `stream_options` in `extra_body` is the caller's as written (the
    client merges it over the named one): kvwise neither adds to it nor hides the usage it asks for."""
    if not call.stream or call.decided.stream_usage_refused:
        return None
    extra = call.params.get("extra_body")
    if isinstance(extra, Mapping) and "stream_options" in extra:
        return None
    options = call.params.get("stream_options")
    if options is None:
        return {"include_usage": True}
    if isinstance(options, Mapping) and options.get("include_usage") is not True:
        return {**options, "include_usage": True}
    return None


def add_stream_usage(call: Call, kwargs: dict[str, Any]) -> None:
    """Ask for usage on a stream (`stream_usage_options`) in `kwargs`, recording the change."""
    if (options := stream_usage_options(call)) is not None:
        kwargs["stream_options"] = options  # the reader hides the usage chunk (`hides_usage`)
        if not call.decided.stream_usage_added:
            call.decided.stream_usage_added = True
            call.decided.changes.append(STREAM_USAGE_REQUESTED)


def _collect_tool_calls(deltas: Any, state: StreamState) -> None:
    """Add a chunk's tool-call deltas to the streamed calls (the id and name come first, the arguments in pieces)."""
    for delta in deltas:
        found = state.tool_call(delta.index)
        found["id"] = delta.id or found["id"]
        function = delta.function
        if function is not None:
            found["name"] = function.name or found["name"]
            found["arguments"] += function.arguments or ""


def _carries_content(delta: ChoiceDelta) -> bool:
    """Whether a delta without text carries content: tool-call or function arguments, a refusal,
    or a server's extra field such as `reasoning_content` (thinking, on vLLM and DeepSeek)."""
    if delta.tool_calls or delta.function_call or delta.refusal:
        return True
    extra = delta.__pydantic_extra__
    return any(extra.values()) if extra else False


class ChatAdapter(Adapter):
    """Leading system/developer messages form the system tier; the rest are turns."""

    api = Api.CHAT
    max_tokens_params = ("max_tokens", "max_completion_tokens")
    fill_param = "max_completion_tokens"
    stop_param = "stop"
    stop_limit = 4
    has_penalties = True
    breakpoint_key = "prompt_cache_breakpoint"

    def to_call(self, kwargs: dict[str, Any], provider: Provider) -> Call:
        params = given_params(kwargs)
        given = given_tiers(params, "tools")
        messages = pop_list(params, "messages", "chat.completions.create", required=True)
        split = count_leading_system(messages)
        return Call(
            api=self.api,
            provider=provider,
            model=str(params.get("model", "")),
            tools=pop_list(params, "tools", "chat.completions.create"),
            system=messages[:split],
            messages=messages[split:],
            params=params,
            given=given,
        )

    def to_kwargs(self, call: Call) -> dict[str, Any]:
        kwargs = dict(call.params)
        kwargs["messages"] = [*call.system, *call.messages]
        if call.tools or "tools" in call.given:
            kwargs["tools"] = call.tools
        add_stream_usage(call, kwargs)
        return kwargs

    def reasoning(self, model: str, params: Mapping[str, Any]) -> Reasoning | None:
        return openai_reasoning(model, params.get("reasoning_effort"))

    def usage(self, response: Any) -> Usage | None:
        return chat_usage(getattr(response, "usage", None))

    def output_text(self, response: Any) -> str:
        return "".join(
            getattr(getattr(choice, "message", None), "content", None) or ""
            for choice in listed(response, "choices")[:1]
        )

    def finish_reasons(self, response: Any) -> tuple[str, ...]:
        return choice_finish_reasons(response)

    def hides_usage(self, call: Call) -> bool:
        return stream_usage_options(call) is not None

    def asks_usage(self, call: Call) -> bool:
        return caller_asks_usage(call)

    def read_event(self, event: ChatCompletionChunk, state: StreamState) -> str | None:
        state.last_event = event
        state.response_id = event.id or state.response_id
        state.response_model = event.model or state.response_model
        usage = event.usage
        if usage is not None:  # the final usage chunk, or every chunk on servers that report it so
            state.usage = chat_usage(usage)
        elif state.hide_usage:  # the bare client's chunks carry no `"usage": null`: leave it unset
            event.__pydantic_fields_set__.discard("usage")
        extra = event.__pydantic_extra__  # (the property `model_extra` costs more; OpenAI adds `obfuscation`)
        if extra and "timings" in extra:  # llama.cpp-style server timings
            state.timings = timings_of(event) or state.timings
        choices = event.choices
        if not choices:  # None on an event type the client does not know
            state.swallow = state.hide_usage and usage is not None and choices is not None
            return None
        text: str | None = None
        for choice in choices:
            if choice.finish_reason is not None:
                state.finished = True
                state.finish_reasons.append(choice.finish_reason)
            delta = choice.delta
            if delta is None:
                continue
            if delta.content:
                if choice.index == 0:
                    text = delta.content  # the answer text that stops and the loop guard read
                elif text is None:
                    text = ""
            elif text is None and _carries_content(delta):
                text = ""
            if delta.tool_calls and state.tool_calls is not None and choice.index == 0:
                _collect_tool_calls(delta.tool_calls, state)
        if text is not None:
            state.output_units += 1
        return text

    def cut_events(self, state: StreamState, truncated: bool, usage: Usage | None) -> list[Any]:
        reason, envelope = cut_envelope(state, truncated, "chat.completion.chunk")
        events = [ChatCompletionChunk(choices=[Choice(index=0, delta=ChoiceDelta(), finish_reason=reason)], **envelope)]
        if state.usage_asked and usage is not None:  # the bare stream's last chunk: no choices, the usage
            events.append(ChatCompletionChunk(choices=[], usage=completion_usage(usage), **envelope))
        return events

    def set_event_text(self, event: ChatCompletionChunk, text: str) -> None:
        event.choices[0].delta.content = text

    def truncate_text(self, response: Any, stops: tuple[str, ...]) -> bool:
        cut = False
        for choice in listed(response, "choices"):
            message: Any = getattr(choice, "message", None)
            content = getattr(message, "content", None)
            if isinstance(content, str) and (index := first_stop(content, stops)) is not None:
                message.content = content[:index]
                choice.finish_reason = "stop"
                cut = True
        return cut
