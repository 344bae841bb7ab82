"""Strict requests: every top-level field of every endpoint is honoured, inert, or refused by name.

A silently ignored field is a silent change of meaning (`response_format` accepted, free text
returned), so each endpoint has one table of the fields it knows:

- `HONOURED`: the route reads it and the answer follows it;
- `INERT`: accepted because it cannot change the answer here (a label such as `user` or
  `metadata`, a cache hint the engine already follows: it caches every full block of every prompt);
- `Off(values)`: a feature this backend does not have; accepted only when absent, null or one of
  `values` (the value that means "off", such as `store: false`), else a 400 naming the field.

A field in no table is a 400 naming it, as the hosted APIs answer ("Unrecognized request argument"
/ "Extra inputs are not permitted"). `check(body, table)` runs before anything else is read.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from local_backend.server._constants import SAMPLING_KNOBS
from local_backend.server.errors import ApiError


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

CHAT: Final[Table] = {
    **_OPENAI_SHARED,
    "messages": HONOURED,
    "max_completion_tokens": HONOURED,
    "metadata": INERT,
    "safety_identifier": INERT,
    "prompt_cache_key": INERT,
    "prompt_cache_retention": INERT,
    "prompt_cache_options": INERT,
    "service_tier": Off(("auto", "default")),
    "store": Off((False,)),
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
    "safety_identifier": INERT,
    "prompt_cache_key": INERT,
    "prompt_cache_retention": INERT,
    "prompt_cache_options": INERT,
    "service_tier": Off(("auto", "default")),
    "store": Off((False,)),
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
    for name in ("model", "messages", "system", "cache_control", "user_profile_id", "workspace_id", "speed",
                 "thinking", "tools", "tool_choice")
} | {"output_config": INERT}  # fmt: skip  (a format constrains the answer, never the prompt counted)
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
