"""Request bodies in, checked values out: JSON with a size cap, typed fields, chat turns, decode params.

Shared by the OpenAI and Anthropic routes, so both wire formats refuse the same bad input with the
same message (only the error body's shape differs, chosen by route). Every refusal is an `ApiError`
that names the field and the bad value.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from starlette.requests import Request

from local_backend.sampling_params import SamplingParams
from local_backend.server._constants import (
    MAX_BODY_BYTES,
    MAX_DRAINED_BODY_BYTES,
    MAX_JSON_INTEGER,
    MAX_STOP_SEQUENCES,
    REPETITION_PENALTY_RANGE,
    SAMPLING_KNOBS,
)
from local_backend.server.bounds import check_nesting, check_text
from local_backend.server.errors import ApiError, ErrorKind

_TYPE_NAMES = {float: "a number", int: "an integer", bool: "a boolean", str: "a string", list: "an array", dict: "an object"}


async def read_json(request: Request) -> dict[str, Any]:
    """The body as a JSON object; 413 past `MAX_BODY_BYTES` (read and dropped, so the client gets it).

    Nesting past `MAX_JSON_DEPTH` and text that is not Unicode scalar values are 400s (see `bounds`).
    """
    header = request.headers.get("content-length", "")
    declared = int(header) if header.isdigit() else 0
    too_large = declared > MAX_BODY_BYTES
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        too_large = too_large or size > MAX_BODY_BYTES
        if size > MAX_DRAINED_BODY_BYTES:
            break
        if not too_large:
            chunks.append(chunk)
    if too_large:
        raise ApiError(
            f"request body of {max(size, declared)} bytes exceeds the limit of {MAX_BODY_BYTES} bytes",
            ErrorKind.TOO_LARGE,
        )
    raw = b"".join(chunks)
    check_nesting(raw)
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise ApiError(f"request body is not valid JSON: {str(exc)[:200]}") from None
    if not isinstance(body, dict):
        raise ApiError(f"request body must be a JSON object, got {type(body).__name__}")
    check_text(raw, body)
    return body


def optional(body: Mapping[str, Any], name: str, kind: type, default: Any = None) -> Any:
    """`body[name]` checked against `kind` (int accepted for float, bool never for numbers), or `default`.

    Numbers must be finite (JSON has no `Infinity`, though Python's parser reads one) and integers
    within int64 (`MAX_JSON_INTEGER`): a value no tensor holds is refused here, not in a step.
    """
    value: Any = body.get(name)
    if value is None:
        return default
    accepted: tuple[type, ...] = (int, float) if kind is float else (kind,)
    if not isinstance(value, accepted) or (isinstance(value, bool) and kind is not bool):
        raise ApiError(f"{name} must be {_TYPE_NAMES[kind]}, got {_short(value)}", param=name)
    too_large = isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_JSON_INTEGER
    if too_large or isinstance(value, float) and not math.isfinite(value):
        raise ApiError(f"{name} must be a finite number within int64's range, got {_short(value)}", param=name)
    return float(value) if kind is float else value


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
        raise ApiError(f"{name} must be a string or a list of non-empty strings, got {_short(value)}", param=name)
    if len(stops) > MAX_STOP_SEQUENCES:
        raise ApiError(f"{name} has {len(stops)} entries; at most {MAX_STOP_SEQUENCES} are allowed", param=name)
    return tuple(stops)


def text_of(content: Any, param: str) -> str:
    """A message's text: a string, or a list of `{"type": "text", "text": ...}` parts (joined).

    Other part types (images, tool calls) are refused: this backend serves text models. Extra keys
    on a text part, such as Anthropic's `cache_control`, are accepted and ignored.
    """
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise ApiError(f"{param} must be a string or a list of text parts, got {_short(content)}", param=param)
    texts = []
    for i, part in enumerate(content):
        if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
            raise ApiError(f"{param}[{i}] must be a text part {{'type': 'text', 'text': ...}}, got {_short(part)}", param=param)
        texts.append(part["text"])
    return "".join(texts)


def sampling_params(
    body: Mapping[str, Any],
    *,
    prompt_tokens: int,
    max_model_len: int,
    max_tokens: int | None,
    max_tokens_param: str,
    stop: tuple[str, ...],
    max_temperature: float,
) -> SamplingParams:
    """`SamplingParams` from the shared knobs, after checking the prompt and `max_tokens` fit the context.

    A prompt of `max_model_len` tokens or more is refused (no room to generate); `max_tokens` above
    `max_model_len` is refused (it could never be met); a smaller one that does not fit after the
    prompt is honoured up to the context's end, with finish reason `length` (llama.cpp's rule).
    Omitted, it is the room left: max_model_len − prompt_tokens.
    """
    if prompt_tokens >= max_model_len:
        raise ApiError(
            f"the prompt has {prompt_tokens} tokens but this model's context is {max_model_len} tokens, "
            "leaving no room to generate: shorten the prompt",
            param="messages",
            code="context_length_exceeded",
        )
    if max_tokens is None:
        max_tokens = max_model_len - prompt_tokens
    elif not 1 <= max_tokens <= max_model_len:
        raise ApiError(
            f"{max_tokens_param}={max_tokens} must be between 1 and the model's context of {max_model_len} tokens",
            param=max_tokens_param,
        )
    knobs = {name: optional(body, name, kind) for name, kind in SAMPLING_KNOBS.items()}
    temperature = knobs["temperature"]
    if temperature is not None and not 0 <= temperature <= max_temperature:
        raise ApiError(f"temperature={temperature} must be between 0 and {max_temperature}", param="temperature")
    low, high = REPETITION_PENALTY_RANGE
    penalty = knobs["repetition_penalty"]
    if penalty is not None and not low < penalty <= high:
        raise ApiError(f"repetition_penalty={penalty} must be in ({low}, {high}] (vLLM's range)", param="repetition_penalty")
    try:
        return SamplingParams(
            max_tokens=max_tokens, stop=stop, **{k: v for k, v in knobs.items() if v is not None}
        )
    except ValueError as exc:
        message = str(exc).replace("SamplingParams.", "")
        raise ApiError(message, param=message.split("=")[0]) from None


def _short(value: Any) -> str:
    """A value for an error message, cut short (never a whole prompt)."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
