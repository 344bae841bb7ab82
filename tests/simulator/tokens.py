"""The simulator's tokenizer and prompt rendering.

Tokenizer: a token is one word (`\\w+`) or one punctuation character, together with the whitespace
before it; whitespace at the very end is a token of its own. It is lossless (the tokens of a text
join back to the text), so replies can be streamed token by token and counted the same way.
"Hello, world!" is 4 tokens: `Hello`, `,`, ` world`, `!`.

Rendering: a request becomes a list of blocks, in the order it was sent: each tool (its JSON as
received, key order kept), then the system prompt / instructions, then every message or input item
(a role marker block, then each content part: text as is, any other part as its JSON). Cache markers
(`cache_control`, `prompt_cache_breakpoint`) are left out of the text, so moving a marker never
changes the prefix, but a block that carried one is flagged as a breakpoint. The prompt's tokens are
the blocks' tokens, each block tokenised on its own, so block ends are token boundaries.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Final

_TOKEN: Final = re.compile(r"\s*(?:\w+|[^\w\s])|\s+")
CACHE_MARKER_KEYS: Final = frozenset({"cache_control", "prompt_cache_breakpoint"})


def tokenize(text: str) -> list[str]:
    """Split `text` into tokens whose concatenation is `text` (see the module docstring)."""
    return _TOKEN.findall(text)


@dataclass(frozen=True, slots=True)
class RenderedBlock:
    """One rendered piece of a prompt; `ttl` is set when the block carries a cache breakpoint."""

    text: str
    ttl: str | None = None
    boundary: bool = True
    """False for a role marker: its end is not a content-block boundary the cache may look at."""

    @property
    def is_breakpoint(self) -> bool:
        return self.ttl is not None


@dataclass(frozen=True, slots=True)
class RenderedPrompt:
    """A rendered prompt: its tokens and the token offset at which each content block ends.

    `breakpoints` maps a block end offset to the cache TTL its marker asked for ("5m" or "1h").
    """

    tokens: tuple[str, ...]
    block_ends: tuple[int, ...]
    breakpoints: dict[int, str]

    @classmethod
    def from_blocks(cls, blocks: list[RenderedBlock]) -> RenderedPrompt:
        tokens: list[str] = []
        ends: list[int] = []
        breakpoints: dict[int, str] = {}
        for block in blocks:
            tokens.extend(tokenize(block.text))
            if block.boundary:
                ends.append(len(tokens))
            if block.ttl is not None:
                breakpoints[len(tokens)] = block.ttl
        return cls(tuple(tokens), tuple(ends), breakpoints)

    def __len__(self) -> int:
        return len(self.tokens)


def marker_ttl(part: object) -> str | None:
    """The TTL of a cache marker on `part` ("5m" by default), or None when it carries none."""
    if not isinstance(part, dict):
        return None
    for key in CACHE_MARKER_KEYS:
        marker = part.get(key)
        if marker is not None:
            return str(marker.get("ttl", "5m")) if isinstance(marker, dict) else "5m"
    return None


def as_json(value: Any) -> str:
    """Deterministic JSON of a value as received (key order kept), without cache markers."""
    if isinstance(value, dict):
        value = {k: v for k, v in value.items() if k not in CACHE_MARKER_KEYS}
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def part_block(part: object, text_types: frozenset[str]) -> RenderedBlock:
    """A content part as a block: the text of a text part, else the part's JSON."""
    if isinstance(part, str):
        return RenderedBlock(part)
    if isinstance(part, dict) and part.get("type") in text_types and isinstance(part.get("text"), str):
        return RenderedBlock(part["text"], marker_ttl(part))
    return RenderedBlock(as_json(part), marker_ttl(part))


def content_blocks(content: object, text_types: frozenset[str]) -> list[RenderedBlock]:
    """The blocks of a `content` field: a string, a list of parts, or anything else as JSON."""
    if content is None:
        return []
    if isinstance(content, list):
        return [part_block(part, text_types) for part in content]
    return [part_block(content, text_types)]


def message_blocks(message: object, text_types: frozenset[str]) -> list[RenderedBlock]:
    """A chat message or input item: a role marker, its content parts, then its other fields as JSON."""
    if not isinstance(message, dict):
        return [RenderedBlock(as_json(message))]
    role = message.get("role", message.get("type", "item"))
    blocks = [RenderedBlock(f"<|{role}|>\n", boundary=False)]
    blocks += content_blocks(message.get("content"), text_types)
    rest = {k: v for k, v in message.items() if k not in ("role", "content") and (k, v) != ("type", "message")}
    if rest:
        blocks.append(RenderedBlock(as_json(rest)))
    return blocks


def tool_blocks(tools: object) -> list[RenderedBlock]:
    """Each tool definition as its own block, JSON as received."""
    if not isinstance(tools, list):
        return []
    return [RenderedBlock(as_json(tool), marker_ttl(tool)) for tool in tools]
