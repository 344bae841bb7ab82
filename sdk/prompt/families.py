"""Which volatile-looking bytes really change between calls, where their shape cannot say: a memory per wrapped client.

Values volatile with high confidence by their shape (a UUID, a date with a time, a request id)
move on first sight (`sdk.prompt.first_sight`), with no memory. The others *look* volatile but may be
the same on every call (a hex run that is a commit or a key id, a value under a plain `Date:`
label, a timestamp written as an example): only calls can tell, so each wrapped client remembers,
per prompt family, the candidate bytes of the family's last call (as hashes: no id or token is kept).

A prompt family is the calls whose stable texts (system prompt, tool descriptions) are the same once
every candidate is masked (`mask_volatile`): "Request ID: <Request ID>\\nFile tickets in project
<uuid>." is one family whatever the id and the project. For each family, a candidate moves from
the first call on which its bytes differ from the family's previous call's, and from then on for
good; until then it stays where the caller put it. A moved candidate (by shape or by memory) whose
bytes also differ from the previous call of the same conversation (the calls whose first user
turn, as the caller wrote it, is the same, each with more turns than the one before) changes
within a conversation, from then on for good, and goes to the tail note at the end of the prompt;
the others stay in the note that ends the first user turn. So no decision flips:
- on the family's first call nothing is known: a candidate its shape does not move stays, and so
  on every later call while its bytes stay the same;
- the call on which such a candidate first differs misses the cache from it on (as the bare
  client's does: its bytes changed there), and from the next call on the family's prompt is the
  same without it, call after call;
- a value moved on sight that stays the same over an agent run costs the run nothing: it stands
  in the note that ends the first user turn, at the same place on every call of the run;
- a family not seen for `VOLATILE_FAMILIES` other families is forgotten (LRU), and starts over.

The memory is bounded, locked (concurrent calls of one client are safe), and costs one hash of the
masked texts and a dictionary look-up per call that has candidates; a call without any costs nothing.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

from sdk._constants import VOLATILE_FAMILIES
from sdk.memory.records import FamilyRecord
from sdk.memory.store import LocalStore, Store


@dataclass(frozen=True, slots=True)
class Changes:
    """Per candidate of a call: whether it has changed between two calls of its family (it moves),
    and whether between two calls of one conversation (it moves to the tail note)."""

    changed: tuple[bool, ...]
    within: tuple[bool, ...]


def next_record(last: FamilyRecord | None, values: tuple[int, ...], conversation: bytes, turns: int) -> FamilyRecord:
    """The family's record after a call with these candidates (see `FamilyMemory.observe`)."""
    if last is None or len(last.values) != len(values):  # a new family, or one of another shape
        changed: tuple[bool, ...] = (False,) * len(values)
        return FamilyRecord(values, changed, changed, conversation, turns)
    differ = [old != new for old, new in zip(last.values, values)]
    same = last.conversation == conversation and turns > last.turns
    changed = tuple(seen or new for seen, new in zip(last.changed, differ))
    within = tuple(seen or (same and new) for seen, new in zip(last.within, differ))
    return FamilyRecord(values, changed, within, conversation, turns)


def value_hash(text: str) -> int:
    """A candidate's bytes as the memory keeps them: a 64-bit hash, the same in every process
    (Python's `hash` of a str is not: workers sharing a memory must agree)."""
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).digest(), "big")


def family_key(masked: Sequence[str]) -> bytes:
    """The family of a call whose stable texts, candidates masked, are `masked` (in order)."""
    digest = hashlib.blake2b(digest_size=16)
    for text in masked:
        digest.update(text.encode("utf-8", "surrogatepass"))
        digest.update(b"\x00")
    return digest.digest()


class FamilyMemory:
    """Per wrapped client: the candidate bytes of each prompt family's last call (see the module), on
    `store` (by default one in this process, of at most `size` families).

    >>> memory = FamilyMemory()
    >>> memory.observe(key, (value_hash("req-1"), value_hash("project-a")), run_1).changed   # the family's first call
    (False, False)
    >>> memory.observe(key, (value_hash("req-2"), value_hash("project-a")), run_2).changed
    (True, False)
    >>> # moved once, moved for good:
    >>> memory.observe(key, (value_hash("req-2"), value_hash("project-a")), run_2).changed
    (True, False)
    >>> # run 2 grew, its id changed:
    >>> memory.observe(key, (value_hash("req-3"), value_hash("project-a")), run_2, turns=3).within
    (True, False)
    """

    def __init__(self, store: Store | None = None, *, size: int = VOLATILE_FAMILIES) -> None:
        self._store = store if store is not None else LocalStore(families=size)

    def observe(self, family: bytes, values: tuple[int, ...], conversation: bytes, turns: int = 1) -> Changes:
        """Record this call's candidates (`values`: the hash of each one's bytes, so no request id or
        token is kept), its `conversation` (a hash of its first user turn) and its number of `turns`;
        return, for each, whether it has differed between two calls of the family, and between two
        successive calls of one conversation (the same first turn, grown by turns: a run that starts
        over with the same request is another), this one included (all False on the family's first
        call: nothing is known yet)."""
        update = functools.partial(next_record, values=values, conversation=conversation, turns=turns)
        record = self._store.update_family(family, update)
        return Changes(record.changed, record.within)

    def __len__(self) -> int:
        return self._store.held("family")
