"""Legacy text completions (`client.completions.create`) <-> `Call`.

A string `prompt` is the call's one turn (there is no system prompt or tool list to order), so
kvwise applies the cap (the API's own default is 16 tokens), stops, penalties, the loop guard and
telemetry. A prompt given as a list (a batch of prompts, or token ids) stays as the caller wrote it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from openai.types import Completion, CompletionChoice

from sdk.adapters._base import Adapter, StreamState, first_stop, given_params, listed, timings_of
from sdk.adapters.openai_chat import (
    add_stream_usage,
    caller_asks_usage,
    chat_usage,
    choice_finish_reasons,
    completion_usage,
    cut_envelope,
    stream_usage_options,
)
from sdk.call import Api, Call, Provider, Usage
from sdk.reasoning import Reasoning

_PROMPT = "prompt"


class CompletionsAdapter(Adapter):
    api = Api.COMPLETIONS
    max_tokens_params = ("max_tokens",)
    fill_param = "max_tokens"
    stop_param = "stop"
    stop_limit = 4
    has_penalties = True
    breakpoint_key = "prompt_cache_breakpoint"

    def to_call(self, kwargs: dict[str, Any], provider: Provider) -> Call:
        params = given_params(kwargs)
        prompt = params.get(_PROMPT)
        messages: list[Any] = []
        if isinstance(prompt, str):
            messages = [{"role": "user", "content": params.pop(_PROMPT)}]
        return Call(
            api=self.api,
            provider=provider,
            model=str(params.get("model", "")),
            tools=[],
            system=[],
            messages=messages,
            params=params,
        )

    def to_kwargs(self, call: Call) -> dict[str, Any]:
        kwargs = dict(call.params)
        if call.messages:
            kwargs[_PROMPT] = call.messages[-1]["content"]
        add_stream_usage(call, kwargs)
        return kwargs

    def reasoning(self, model: str, params: Mapping[str, Any]) -> Reasoning | None:
        return None

    def usage(self, response: Any) -> Usage | None:
        return chat_usage(getattr(response, "usage", None))

    def output_text(self, response: Any) -> str:
        return "".join(getattr(choice, "text", None) or "" for choice in listed(response, "choices")[:1])

    def finish_reasons(self, response: Any) -> tuple[str, ...]:
        return choice_finish_reasons(response)

    def hides_usage(self, call: Call) -> bool:
        return stream_usage_options(call) is not None

    def asks_usage(self, call: Call) -> bool:
        return caller_asks_usage(call)

    def read_event(self, event: Completion, state: StreamState) -> str | None:
        state.last_event = event
        if state.hide_usage:
            event.__pydantic_fields_set__.discard("usage")
        state.response_id = event.id or state.response_id
        state.response_model = event.model or state.response_model
        if event.usage is not None:
            state.usage = chat_usage(event.usage)
        state.timings = timings_of(event) or state.timings
        choices = event.choices
        if not choices:
            state.swallow = state.hide_usage and event.usage is not None and choices is not None
            return None
        text: str | None = None
        for choice in choices:
            if choice.finish_reason is not None:
                state.finished = True
                state.finish_reasons.append(choice.finish_reason)
            if choice.text:
                text = choice.text if choice.index == 0 else (text or "")
        if text is not None:
            state.output_units += 1
        return text

    def cut_events(self, state: StreamState, truncated: bool, usage: Usage | None) -> list[Any]:
        reason, envelope = cut_envelope(state, truncated, "text_completion")
        choice = CompletionChoice(finish_reason=reason, index=0, logprobs=None, text="")
        events = [Completion(choices=[choice], **envelope)]
        if state.usage_asked and usage is not None:  # the bare stream's last chunk: no choices, the usage
            events.append(Completion(choices=[], usage=completion_usage(usage), **envelope))
        return events

    def set_event_text(self, event: Completion, text: str) -> None:
        event.choices[0].text = text

    def truncate_text(self, response: Any, stops: tuple[str, ...]) -> bool:
        cut = False
        for choice in listed(response, "choices"):
            text = getattr(choice, "text", None)
            if isinstance(text, str) and (index := first_stop(text, stops)) is not None:
                choice.text = text[:index]
                choice.finish_reason = "stop"
                cut = True
        return cut
