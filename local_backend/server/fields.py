"""Strict requests: every top-level field of every endpoint is honoured, inert, or refused by name.

A silently ignored field is a silent change of meaning (`response_format` accepted, free text
returned), so each endpoint has one table of the fields it knows:

- `HONOURED`: the route reads it and the answer follows it;
- `INERT`: accepted because it cannot change the answer here (a label such as `user` or
  `metadata`, a cache hint the engine already follows: it caches every full block of every prompt);
- `Off(values)`: a feature this backend does not have; accepted only when absent, null or one of
  `values` (the value that means "off", such as `store: false`), else a 400 naming the field.

A field in no table is a 400 naming it, as the hosted APIs answer ("Unrecognized request argument"
/ "Extra inputs are not permitted"). `check(body, table)` runs before anything else is read; then
each endpoint's parser (`requests`) reads every field it honours once, with `optional` /
`required` / `stop_strings`, which refuse a value of the wrong JSON type, a number no tensor holds,
or a bad stop list with a 400 naming the field and the value.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from local_backend.sampling import knobs as sampling_knobs
from local_backend.server._constants import MAX_JSON_INTEGER, MAX_STOP_SEQUENCES
from local_backend.server.errors import ApiError

SAMPLING_KNOBS: Final = {knob.name: knob.kind for knob in sampling_knobs.SAMPLING_KNOBS}
"""Request fields passed to `SamplingParams` under the same name, with their JSON type (from
`sampling/knobs.py`, the one list); every generating endpoint reads all of them."""


class Use(enum.Enum):
    HONOURED = "honoured"
    INERT = "inert"


HONOURED: Final = Use.HONOURED
INERT: Final = Use.INERT


@dataclass(frozen=True, slots=True)
class Off:
    """A feature the backend lacks: only these values (besides null) are accepted, meaning "off"."""

    values: tuple[Any, ...] = ()


Rule = Use | Off
Table = Mapping[str, Rule]

_EXTRAS: Final[dict[str, Rule]] = {name: HONOURED for name in SAMPLING_KNOBS}
"""vLLM's sampling extras (`top_k`, `min_p`, `repetition_penalty`, `ignore_eos`...), on every endpoint."""

_OPENAI_SHARED: Final[dict[str, Rule]] = {
    **_EXTRAS,
    "model": HONOURED,
    "max_tokens": HONOURED,
    "n": HONOURED,
    "stop": HONOURED,
    "stream": HONOURED,
    "stream_options": HONOURED,
    "user": INERT,
    "logit_bias": HONOURED,
    "logprobs": HONOURED,
}

_OPENAI_HOSTED: Final[dict[str, Rule]] = {
    "safety_identifier": INERT,
    "prompt_cache_key": INERT,
    "prompt_cache_retention": INERT,
    "prompt_cache_options": INERT,
    "service_tier": Off(("auto", "default")),
    "store": Off((False,)),
}
"""What Chat and Responses share of the hosted API's service: labels, cache hints (the engine caches
every prompt anyway), the capacity tier, storage (none here)."""

_GRAMMARS: Final[dict[str, Rule]] = {"json_schema": HONOURED, "grammar": HONOURED}
"""llama.cpp's constraints of the answer: a JSON schema, or a GBNF grammar."""

_TEMPLATE: Final[dict[str, Rule]] = {
    "add_generation_prompt": HONOURED,
    "continue_final_message": HONOURED,
    "chat_template_kwargs": HONOURED,
}
"""vLLM's Chat extras that shape how the chat template renders the prompt."""

EXTENSIONS: Final = frozenset(SAMPLING_KNOBS) | frozenset(_GRAMMARS) | frozenset(_TEMPLATE)
"""The fields vLLM's and llama.cpp's users send that no OpenAI or Anthropic client names."""

CHAT: Final[Table] = {
    **_OPENAI_SHARED,
    **_GRAMMARS,
    **_TEMPLATE,
    "messages": HONOURED,
    "max_completion_tokens": HONOURED,
    "metadata": INERT,
    **_OPENAI_HOSTED,
    "modalities": Off((["text"],)),
    "response_format": HONOURED,
    "tools": HONOURED,
    "tool_choice": HONOURED,
    "parallel_tool_calls": HONOURED,
    "functions": Off(([],)),
    "function_call": Off(("none",)),
    "top_logprobs": HONOURED,
    "audio": Off(),
    "prediction": Off(),
    "reasoning_effort": Off(("none",)),
    "verbosity": Off(),
    "web_search_options": Off(),
    "moderation": Off(),
}

COMPLETIONS: Final[Table] = {
    **_OPENAI_SHARED,
    **_GRAMMARS,
    "prompt": HONOURED,
    "echo": HONOURED,
    "best_of": Off((1,)),
    "suffix": Off(("",)),
}

MESSAGES: Final[Table] = {
    **_EXTRAS,
    "model": HONOURED,
    "max_tokens": HONOURED,
    "messages": HONOURED,
    "system": HONOURED,
    "stop_sequences": HONOURED,
    "stream": HONOURED,
    "cache_control": INERT,
    "metadata": INERT,
    "user_profile_id": INERT,
    "workspace_id": INERT,
    "service_tier": INERT,  # "auto" or "standard_only": which capacity, never what is answered
    "speed": Off(("standard",)),
    "inference_geo": Off(),
    "diagnostics": Off(),
    "container": Off(),
    "output_config": HONOURED,  # its `format` (structured outputs); `effort` is refused
    "thinking": Off(({"type": "disabled"},)),
    "tools": HONOURED,
    "tool_choice": HONOURED,
}

RESPONSES: Final[Table] = {
    **_EXTRAS,
    "model": HONOURED,
    "input": HONOURED,
    "instructions": HONOURED,
    "max_output_tokens": HONOURED,
    "stream": HONOURED,
    "metadata": HONOURED,  # echoed back in the `Response`
    "user": INERT,
    **_OPENAI_HOSTED,
    "background": Off((False,)),
    "stream_options": Off(({"include_obfuscation": False}, {})),
    "truncation": Off(("disabled",)),
    "include": Off(([],)),
    "text": HONOURED,  # its `format`: text, json_object or json_schema
    "tools": HONOURED,  # function tools
    "tool_choice": HONOURED,
    "parallel_tool_calls": Off((True,)),  # false (at most one call) is not enforced here
    "max_tool_calls": Off(),
    "top_logprobs": Off((0,)),
    "reasoning": Off(),
    "previous_response_id": Off(),
    "conversation": Off(),
    "prompt": Off(),
    "context_management": Off(),
    "background_options": Off(),
    "moderation": Off(),
    "image": Off(),
    "access_programs": Off(),
}

COUNT_TOKENS: Final[Table] = {
    name: MESSAGES[name]
    for name in (
        "model",
        "messages",
        "system",
        "cache_control",
        "user_profile_id",
        "workspace_id",
        "speed",
        "thinking",
        "tools",
        "tool_choice",
    )
} | {"output_config": INERT}  # a format constrains the answer, never the prompt counted
"""The fields of a message that shape its prompt, with the same rules as `MESSAGES`."""


def check(body: Mapping[str, Any], table: Table, endpoint: str) -> None:
    """400 naming the first field `table` does not know, or one set to a feature the backend lacks."""
    for name, value in body.items():
        rule = table.get(name)
        if rule is None:
            raise ApiError(f"{name}: unrecognized request field for {endpoint}", param=name)
        if isinstance(rule, Off) and value is not None and not _is_one_of(value, rule.values):
            allowed = " (accepted: " + ", ".join(map(repr, rule.values)) + ")" if rule.values else ""
            raise ApiError(f"{name} is not supported by the kvwise local backend{allowed}", param=name)


def _is_one_of(value: Any, values: tuple[Any, ...]) -> bool:
    """Equal to one of `values` and of its JSON type (`1` is not `true`, `0` is not `false`)."""
    return any(type(value) is type(v) and value == v for v in values)


_TYPE_NAMES: Final = {
    float: "a number",
    int: "an integer",
    bool: "a boolean",
    str: "a string",
    list: "an array",
    dict: "an object",
}


def optional(
    body: Mapping[str, Any], name: str, kind: type, default: Any = None, largest: int = MAX_JSON_INTEGER
) -> Any:
    """`body[name]` checked against `kind` (int accepted for float, bool never for numbers), or `default`.

    Numbers must be finite (JSON has no `Infinity`, though Python's parser reads one) and integers
    within int64 (`MAX_JSON_INTEGER`, or `largest`: a seed may reach 2^64 - 1): a value no tensor
    holds is refused here, not in a step.
    """
    value: Any = body.get(name)
    if value is None:
        return default
    if not _is_of(value, kind):
        raise ApiError(f"{name} must be {_TYPE_NAMES[kind]}, got {short(value)}", param=name)
    too_large = isinstance(value, int) and not isinstance(value, bool) and abs(value) > largest
    if too_large or isinstance(value, float) and not math.isfinite(value):
        raise ApiError(f"{name} must be a finite number of magnitude at most {largest}, got {short(value)}", param=name)
    return float(value) if kind is float else value


def _is_of(value: Any, kind: type) -> bool:
    """`value` is of JSON type `kind`: an int is a number too, a bool is never one."""
    accepted: tuple[type, ...] = (int, float) if kind is float else (kind,)
    return isinstance(value, accepted) and not (isinstance(value, bool) and kind is not bool)


def required(body: Mapping[str, Any], name: str, kind: type) -> Any:
    value = optional(body, name, kind)
    if value is None:
        raise ApiError(f"{name}: field required", param=name)
    return value


def stop_strings(body: Mapping[str, Any], name: str) -> tuple[str, ...]:
    """A string or a list of non-empty strings (at most `MAX_STOP_SEQUENCES`)."""
    value = body.get(name)
    stops = [] if value is None else [value] if isinstance(value, str) else value
    if not isinstance(stops, list) or not all(isinstance(s, str) and s for s in stops):
        raise ApiError(f"{name} must be a string or a list of non-empty strings, got {short(value)}", param=name)
    if len(stops) > MAX_STOP_SEQUENCES:
        raise ApiError(f"{name} has {len(stops)} entries; at most {MAX_STOP_SEQUENCES} are allowed", param=name)
    return tuple(stops)


def short(value: Any) -> str:
    """A value for an error message, cut short (never a whole prompt)."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
