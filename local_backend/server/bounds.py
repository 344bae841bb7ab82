"""Cheap bounds every request meets before anything costly reads it: size, nesting, text, schemas, prompt size.

`read_json` is a request's first step (before `requests` parses it): the body's size, its nesting,
JSON itself and its text. Each refusal is a 413 or a 400 naming the field (an `ApiError`, rendered
in the route's API's error form), and each costs far less than the work it guards:

- The body is read up to `MAX_BODY_BYTES` (past it, read and dropped up to `MAX_DRAINED_BODY_BYTES`
  so the client gets its 413, then given up).
- JSON nesting (`MAX_JSON_DEPTH`) is measured on the raw bytes, before `json.loads`: escaped
  backslashes and quotes dropped, the strings cut out between their quotes, the brackets kept by
  `bytes.translate`, and their running depth summed (not at all for a body with fewer brackets
  than the bound). No recursive walk of user input runs deeper than this bound in the server.
- Text must be Unicode scalar values: a lone surrogate (`"\\udfff"`) is legal JSON but no tokenizer
  can encode it. Only a body whose bytes may hold one (a `\\uD800`-`\\uDFFF` escape) is walked to
  name the field.
- A JSON schema or a grammar is bounded by what it costs to compile (`compile_bounds`).
- A prompt whose text bytes cannot fit the context is refused before the chat template renders it:
  a token covers at most `max_bytes_per_token` bytes, so text of B bytes is at least
  B ÷ max_bytes_per_token tokens.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Iterable, Iterator
from typing import Any

import torch
from starlette.requests import Request

from local_backend.server._constants import (
    MAX_BODY_BYTES,
    MAX_COUNTED_BYTES,
    MAX_DRAINED_BODY_BYTES,
    MAX_JSON_CONTAINERS,
    MAX_JSON_DEPTH,
)
from local_backend.server.errors import ApiError, ErrorKind
from local_backend.server.offload import Offload

_BRACKETS = bytes.maketrans(b"{}", b"[]")
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_STEPS = bytes.maketrans(b"[]", b"\x01\xff")
_BYTE = 255
_TENSOR_STEPS = 2**19
_MAYBE_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F]|\xed[\xa0-\xbf]")
"""A JSON escape of a UTF-16 surrogate, or one encoded raw (`json.loads` passes those through)."""


async def read_json(request: Request, offload: Offload) -> dict[str, Any]:
    """The body as a JSON object, decoded on an `offload` thread; 413 past `MAX_BODY_BYTES`, 400 past
    the nesting or text bounds."""
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
    return await offload.run(decode_json, b"".join(chunks))


def decode_json(raw: bytes) -> dict[str, Any]:
    """The UTF-8 JSON object `raw` holds; 400 past the nesting or text bounds, or in another encoding.

    `json.loads` of bytes would also read UTF-16 and UTF-32, whose bytes the nesting and surrogate
    scans cannot read; network JSON is UTF-8 (RFC 8259), so the bytes are decoded as UTF-8 first, and
    the scans then read exactly the text that is parsed (a surrogate encoded raw is let through the
    decoding to be named by `check_text`)."""
    try:
        text = raw.decode("utf-8", "surrogatepass")
    except UnicodeDecodeError as exc:
        raise ApiError(
            f"request body is not UTF-8 (byte {exc.start} of {len(raw)}): send JSON encoded as UTF-8, "
            "as RFC 8259 requires"
        ) from None
    check_nesting(raw)
    try:
        body = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise ApiError(f"request body is not valid JSON: {str(exc)[:200]}") from None
    if not isinstance(body, dict):
        raise ApiError(f"request body must be a JSON object, got {type(body).__name__}")
    check_text(raw, body)
    return body


def check_nesting(raw: bytes, limit: int = MAX_JSON_DEPTH) -> None:
    """400 when the JSON text `raw` holds more than `MAX_JSON_CONTAINERS` arrays and objects, or nests
    them deeper than `limit` (strings ignored): both before `json.loads` builds a single one."""
    unescaped = raw.replace(b"\\\\", b"").replace(b'\\"', b"")  # what is left of a string holds no `"`
    brackets = b"".join(unescaped.split(b'"')[::2]).translate(_BRACKETS, _NOT_BRACKETS)  # outside the strings
    opened = brackets.count(b"[")
    if opened > MAX_JSON_CONTAINERS:
        raise ApiError(f"request body holds {opened} arrays and objects; at most {MAX_JSON_CONTAINERS} are allowed")
    if opened <= limit:
        return
    if b"[" * (limit + 1) in brackets or _deepest(brackets.translate(_STEPS)) > limit:
        raise ApiError(f"request body nests arrays and objects deeper than {limit} levels")


def _deepest(steps: bytes) -> int:
    """The deepest running sum of `steps` (1 opens, 255 closes), modulo 256: the depth wherever it is
    at most 255, and a depth past a bound below 256 first reaches the bound + 1 (closing more than
    was opened, never JSON, reads as deep). Summed in Python up to `_TENSOR_STEPS`, then as a
    tensor: its fixed cost is higher, but its cost per byte is a small fraction of Python's, so a
    body near `MAX_BODY_BYTES` is measured in a fraction of the time."""
    if len(steps) < _TENSOR_STEPS:
        return max(map(_BYTE.__and__, itertools.accumulate(steps)))
    sums = torch.frombuffer(bytearray(steps), dtype=torch.uint8).to(torch.int32).cumsum(0)
    return int(sums.bitwise_and(_BYTE).max())


def check_text(raw: bytes, body: Any) -> None:
    """400 naming the first string (key or value) of `body` that holds a lone surrogate."""
    if b"\\u" not in raw and b"\xed" not in raw or _MAYBE_SURROGATE.search(raw) is None:
        return
    for path, text in _strings(body, ""):
        bad = lone_surrogate(text)
        if bad is not None:
            field = path.lstrip(".") or "body"  # may quote a key's surrogate: `error_body` escapes it
            raise ApiError(
                f"{field} holds a lone surrogate (U+{ord(text[bad]):04X} at index {bad}): text must be "
                "Unicode scalar values",
                param=field.split("[")[0].split(".")[0],
            )


def lone_surrogate(text: str) -> int | None:
    """The index of the first lone surrogate in `text` (it cannot be encoded as UTF-8), or None."""
    try:
        text.encode()
    except UnicodeEncodeError as exc:
        return exc.start
    return None


def _strings(value: Any, path: str) -> Iterator[tuple[str, str]]:
    """Every string of a parsed body with its path (`messages[0].content`), keys included; iterative."""
    stack = [(path, value)]
    while stack:
        where, node = stack.pop()
        if isinstance(node, str):
            yield where, node
        elif isinstance(node, dict):
            for key, item in reversed(node.items()):
                yield f"{where}.{key}", key
                stack.append((f"{where}.{key}", item))
        elif isinstance(node, list):
            stack.extend((f"{where}[{i}]", item) for i, item in reversed(list(enumerate(node))))


def check_counted_size(texts: Iterable[str], param: str) -> None:
    """400 when a prompt to be counted (not generated from: no context bounds it) holds more than
    `MAX_COUNTED_BYTES` of text, before anything renders or tokenizes it."""
    size = 0
    for text in texts:
        size += len(text.encode(errors="surrogatepass"))
        if size > MAX_COUNTED_BYTES:
            raise ApiError(
                f"the prompt's text is over {MAX_COUNTED_BYTES} bytes, more than this server counts: count it in parts",
                param=param,
            )


def check_prompt_size(texts: Iterable[str], max_bytes_per_token: int | None, max_model_len: int, param: str) -> None:
    """400 (`context_length_exceeded`) when `texts`, all of which the prompt renders, cannot fit the context.

    A lower bound, never an estimate: at least ⌈bytes ÷ max_bytes_per_token⌉ tokens. Without a
    bound for this tokenizer (`None`), the exact count after rendering decides.
    """
    if max_bytes_per_token is None:
        return
    size = 0
    for text in texts:
        size += len(text.encode(errors="surrogatepass"))
    least = -(-size // max_bytes_per_token)
    if least >= max_model_len:
        raise ApiError(
            f"the prompt's text is {size} bytes, at least {least} tokens, but this model's context is "
            f"{max_model_len} tokens, leaving no room to generate: shorten the prompt",
            param=param,
            code="context_length_exceeded",
        )
