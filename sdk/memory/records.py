"""What the memories keep that the stores (`sdk.memory.store`) still know by name, as plain values.

A feature that owns its records keeps them through a `sdk.memory.store.Codec` (a family's:
`sdk.prompt.family_record`). A store knows these records and nothing above them, so the memories (`sdk.prompt.families`,
`sdk.decode.adaptive_caps`, `sdk.cache.fanout`, `sdk.cache.fingerprint`) sit on the stores and never the other way:
what a record needs of a feature (how a segment's volatile bytes are masked) the feature hands it.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

WindowsKey = tuple[str, ...]
"""Whose answer windows (`sdk.memory.store.Store.push_answer`): the parts the store hashes into their key
(an adaptive caps' workload: `sdk.decode.adaptive_caps.WorkloadKey`)."""

compact_json = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), default=str).encode
"""Compact JSON, as the clients send it (key order kept): one encoder, not one per `json.dumps` call."""
_sorted_json = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), sort_keys=True, default=str).encode


def digest(*parts: object) -> str:
    """A hash of `parts` (hex): how a store outside the process names a key, or keeps a value it must not hold."""
    hashed = hashlib.blake2b(digest_size=16)
    for part in parts:
        hashed.update(str(part).encode("utf-8", "surrogatepass"))
        hashed.update(b"\x00")
    return hashed.hexdigest()


def sha256_hex(text: str) -> str:
    """The hash a fingerprint chains (`sdk.cache.fingerprint.segments`)."""
    return hashlib.sha256(text.encode()).hexdigest()


class Segment(NamedTuple):
    """One stable segment of a prefix fingerprint: its key ("system[0]"), chained hash, and its bytes
    (to explain a break).

    `mask` masks its volatile bytes (`sdk.prompt.volatile.mask_volatile`, which the fingerprint hands it).
    A segment read back from a shared store has no bytes (`content` None) and no `mask`: its `tool` is
    a hash of the tool's name and `sorted_form` / `masked_form` were kept as hashes."""

    key: str
    chain: str
    content: str | None
    tool: str | None
    kept_sorted: str | None = None
    kept_masked: str | None = None
    mask: Callable[[str], str] | None = None

    def sorted_form(self) -> str:
        """A hash of the segment as JSON with sorted keys (what stays when only the serialisation differs)."""
        if self.content is None:
            return self.kept_sorted or ""
        return sha256_hex(_sorted_json(json.loads(self.content)))

    def masked_form(self) -> str:
        """A hash of the segment with its volatile bytes masked (what stays when only they differ)."""
        if self.content is None or self.mask is None:
            return self.kept_masked or ""
        return sha256_hex(self.mask(self.content))

    def same_when_sorted(self, other: Segment) -> bool:
        """Equal as JSON with sorted keys: only the serialisation differs."""
        return self.sorted_form() == other.sorted_form()

    def same_when_masked(self, other: Segment) -> bool:
        """Equal once volatile bytes are masked: only volatile content differs."""
        return self.masked_form() == other.masked_form()


@dataclass(slots=True)
class Seen:
    """What the prefix tracker remembers of the last call of an API and model.

    `message_id` is learnt from its answer.
    """

    model: str
    chain: list[Segment]
    settings: tuple[str, ...]
    at: float
    message_id: str | None = None
    on_learn: Callable[[str], None] | None = None  # where a shared store keeps the id too

    def learn(self, message_id: str) -> None:
        """The answer's id (named as the previous message by the next request of its API and model)."""
        self.message_id = message_id
        if self.on_learn is not None:
            self.on_learn(message_id)

    def hash_settings(self) -> None:
        """Keep the settings as a store outside the process does: hashed, as they may carry what it must not hold."""
        self.settings = tuple([digest(setting) if setting else "" for setting in self.settings])


@dataclass(slots=True)
class Leader:
    """An in-flight call others wait for (`sdk.cache.fanout`); `span_id` is its span's id (hex), when it has one;
    `lease`: the token of its lease in a shared store, None when it lives in this process."""

    key: bytes
    span_id: str | None = None
    lease: str | None = None
    released: threading.Event = field(default_factory=threading.Event)
    futures: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = field(default_factory=list)


def hashed_segment(segment: Segment, stored: Segment | None) -> Segment:
    """`segment` as a store outside the process keeps it: its hashes (the stored ones where it has not changed)."""
    if stored is not None and stored.chain == segment.chain and stored.key == segment.key:
        return stored
    tool = digest(segment.tool) if segment.tool is not None else None
    return Segment(segment.key, segment.chain, None, tool, segment.sorted_form(), segment.masked_form())
