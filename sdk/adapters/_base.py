"""What every API adapter shares: walking native content for text, and the stream reader's state."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from sdk.call import Api, Call, Provider, Usage
from sdk.reasoning import Reasoning

TEXT_PART_TYPES = frozenset({"text", "input_text", "output_text"})


def is_given(value: object) -> bool:
    """True unless `value` is one of the clients' "not given" sentinels (`omit`, `NOT_GIVEN`)."""
    return type(value).__name__ not in ("Omit", "NotGiven")


def given_params(kwargs: dict[str, Any]) -> dict[str, Any]:
    """The caller's keyword arguments without the "not given" sentinels."""
    return {key: value for key, value in kwargs.items() if is_given(value)}


def as_items(value: Any, key: str, where: str) -> list[Any]:
    """`value` as a list, materialised once: any iterable the clients take as `Iterable[...]` (a list,
    a tuple, a generator); strings, bytes and mappings are refused with a clear `TypeError`."""
    if isinstance(value, list):
        return list(value)
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Iterable):
        raise TypeError(f"{where}: {key} must be a list (or another iterable) of items, got {type(value).__name__}")
    return list(value)


def pop_list(params: dict[str, Any], key: str, where: str, required: bool = False) -> list[Any]:
    """Remove `params[key]` and return it as a list (see `as_items`).

    An absent optional key is `[]`; so is an explicit None, which stays in `params`: the caller's
    None is theirs to send.
    """
    if not required and params.get(key) is None:
        return []
    return as_items(params.pop(key, None), key, where)


def given_tiers(params: dict[str, Any], *keys: str) -> frozenset[str]:
    """Which of the tier parameters `keys` the caller passed with a value (see `Call.given`)."""
    return frozenset(key for key in keys if params.get(key) is not None)


def count_leading_system(items: list[Any]) -> int:
    """How many leading items are system/developer messages (the system tier of OpenAI APIs)."""
    count = 0
    while count < len(items) and isinstance(items[count], dict) and items[count].get("role") in ("system", "developer"):
        count += 1
    return count


def map_text(content: Any, transform: Callable[[str], str]) -> Any:
    """Return `content` with every text leaf transformed; other shapes (images, audio) are kept as is."""
    if isinstance(content, str):
        return transform(content)
    if isinstance(content, list):
        return [map_text(item, transform) for item in content]
    if isinstance(content, dict):
        if content.get("type") in TEXT_PART_TYPES and isinstance(content.get("text"), str):
            return {**content, "text": transform(content["text"])}
        if "content" in content and content.get("type") not in ("tool_result", "function_call_output"):
            return {**content, "content": map_text(content["content"], transform)}
    return content


def map_descriptions(tool: Any, transform: Callable[[str], str]) -> Any:
    """Return a tool definition with every `description` string (schema ones included) transformed."""
    if isinstance(tool, list):
        return [map_descriptions(item, transform) for item in tool]
    if isinstance(tool, dict):
        return {
            key: transform(value)
            if key == "description" and isinstance(value, str)
            else map_descriptions(value, transform)
            for key, value in tool.items()
        }
    return tool


@dataclass(slots=True)
class StreamState:
    """What a stream reader learned from the events seen so far.

    `hide_usage`: the SDK asked for a usage event the caller did not (Chat's `include_usage`), so the
    reader keeps it, and the traces of asking, from the caller; it sets `swallow` on such an event.
    `usage_asked`: the caller asked for that usage event themselves, so a stream kvwise cuts ends
    with one, as the bare stream would have.
    `output_units`: content events of the answer (text, tool arguments, thinking, refusals).
    `tool_calls`: the answer's tool calls as they stream, by index (`{"id", "name", "arguments"}` and
    `object_arguments` where the API gives them as an object,
    the arguments as the JSON text streamed so far); None, and never read, unless content is captured.
    """

    text: list[str] = field(default_factory=list)
    finished: bool = False
    usage: Usage | None = None
    finish_reasons: list[str] = field(default_factory=list)
    response_id: str | None = None
    response_model: str | None = None
    output_units: int = 0
    timings: dict[str, float] | None = None
    last_event: Any = None
    last_start_usage: Any = None
    start_message: Any = None  # Anthropic's `message_start` message (its diagnostics are read at the end)
    hide_usage: bool = False
    usage_asked: bool = False
    swallow: bool = False
    tool_calls: dict[int, dict[str, Any]] | None = None

    def tool_call(self, index: int) -> dict[str, Any]:
        """The streamed tool call at `index` (call only where `tool_calls` is kept)."""
        assert self.tool_calls is not None
        return self.tool_calls.setdefault(index, {"id": None, "name": None, "arguments": ""})


class Adapter:
    """Native kwargs <-> `Call`, and the readers of responses and stream events, for one API.

    Subclasses set the class attributes and implement the conversions; nothing here does I/O.
    """

    api: ClassVar[Api]
    text_part_type: ClassVar[str] = "text"
    max_tokens_params: ClassVar[tuple[str, ...]]
    fill_param: ClassVar[str]  # the parameter a missing cap is filled in (the API's current name)
    requires_max_tokens: ClassVar[bool] = False
    stop_param: ClassVar[str | None]
    stop_limit: ClassVar[int | None] = None
    has_penalties: ClassVar[bool] = False
    breakpoint_key: ClassVar[str]

    def to_call(self, kwargs: dict[str, Any], provider: Provider) -> Call:
        raise NotImplementedError

    def to_kwargs(self, call: Call) -> dict[str, Any]:
        raise NotImplementedError

    def reasoning(self, model: str, params: Mapping[str, Any]) -> Reasoning | None:
        """Whether a call with these (effective) parameters reasons first, and within what budget."""
        raise NotImplementedError

    def usage(self, response: Any) -> Usage | None:
        raise NotImplementedError

    def output_text(self, response: Any) -> str:
        """The text of a non-streamed response (for opt-in content capture)."""
        raise NotImplementedError

    def finish_reasons(self, response: Any) -> tuple[str, ...]:
        """Why a non-streamed response ended, in the API's own words."""
        raise NotImplementedError

    def hides_usage(self, call: Call) -> bool:
        """Whether the SDK asks this streamed call for a usage event the caller did not ask for."""
        return False

    def asks_usage(self, call: Call) -> bool:
        """Whether the caller asked this streamed call for a usage event of its own (an option the
        API has for it; where usage always comes with the final event there is none to ask for)."""
        return False

    def read_event(self, event: Any, state: StreamState) -> str | None:
        """Update `state` from one stream event; None when it carries no content, else the answer
        text it carries ("" for content that is not answer text: tool arguments, thinking, refusals).

        The first content event ends the prefill phase (and lets fan-out followers go). Events
        before it (role chunk, `message_start`, `response.created`) are headers, handed on as they
        arrive like every event.
        """
        raise NotImplementedError

    def cut_events(self, state: StreamState, truncated: bool, usage: Usage | None) -> list[Any]:
        """Events that end a stream the SDK cut, as the bare stream would have ended: of the classes
        of the API called (its beta twin's for a beta call) and with the usage where the API reports
        it at the end (`usage_asked` where that is the caller's option).

        `truncated` is True for the loop guard (the API's length signal) and False for a
        client-side stop sequence (a normal end). `usage` is what the call span records: the
        server's figures where it sent them, output counted up to the cut, else the estimate.
        """
        raise NotImplementedError

    def set_event_text(self, event: Any, text: str) -> None:
        """Replace the text an event carries (used to cut it at a client-side stop)."""
        raise NotImplementedError

    def truncate_text(self, response: Any, stops: tuple[str, ...]) -> bool:
        """Cut a non-streamed response's text at the first client-side stop; True if it cut."""
        raise NotImplementedError


def first_stop(text: str, stops: tuple[str, ...]) -> int | None:
    """Index of the earliest occurrence of any stop sequence in `text`, or None."""
    positions = [index for stop in stops if (index := text.find(stop)) >= 0]
    return min(positions) if positions else None


def listed(obj: Any, name: str) -> list[Any]:
    """`obj.name` where it is a list, else `[]`: a non-strict client hands over a 200 body as it came,
    without `choices` or `content` or with them null, and reading an answer must not raise."""
    value = getattr(obj, name, None)
    return value if isinstance(value, list) else []


def detail_tokens(details: Any, name: str) -> int:
    """A usage details object's token count `name` (0 where the server left it or the details out)."""
    return int(getattr(details, name, None) or 0)


def timings_of(obj: Any) -> dict[str, float] | None:
    """llama.cpp-style `timings` carried as an extra field of a response or chunk, if any."""
    extra = getattr(obj, "model_extra", None) or {}
    timings = extra.get("timings")
    return dict(timings) if isinstance(timings, dict) else None
