"""Which volatile-looking bytes really change between calls, where their shape cannot say: a memory per wrapped client.

Values volatile with high confidence by their shape (a UUID, a date with a time, a request id)
move on first sight (`sdk.prompt.first_sight`), with no memory. The others *look* volatile but may be
the same on every call (a hex run that is a commit or a key id, a timestamp written as an example),
or do not look volatile at all (a weekday line, a `git status` block, a directory listing, a temp
path, a port, a counter, a user's name): only calls can tell, so each wrapped client remembers, per
prompt family, the candidate bytes and the lines of the family's last call (as hashes: no id, token
or prompt text is kept).

How a family is found: by the model and the *outline* of its stable texts (`family_outline`), the
first and the last line of each system text and every tool description, each masked
(`mask_volatile`), so that a line that changes between them keeps the call in its family, while two
prompts of one product that differ in a few lines for two models (a coding agent's prompt for each
model it drives) are two families, whose lines never teach each other. Within a family:
- lines (`FamilyMemory.observe_lines`): the call's system lines, masked and hashed, are aligned
  with the last call's (`difflib`), and the lines this call inserted or replaced have changed, from
  then on for good, and move whole, each with its line; a call whose lines differ in more than
  `VOLATILE_LINES_TAUGHT_SHARE` of them (and `VOLATILE_LINES_TAUGHT_MIN`) is another prompt that
  shares the outline: it replaces the remembered lines but teaches nothing, so two prompts that
  share a first line never mark each other's lines;
- candidates (`FamilyMemory.observe`): keyed by the masked texts without the lines that change
  (`family_key`): "Request ID: <Request ID>\\nFile tickets in project <uuid>." is one family
  whatever the id and the project. A candidate moves from the first call on which its bytes differ
  from the family's previous call's, and from then on for good; until then it stays where the caller
  put it.
A moved candidate or line (by shape or by memory) whose bytes also differ from the previous call of
the same conversation (the calls whose first user turn, as the caller wrote it, is the same, each
with more turns than the one before) changes within a conversation, from then on for good, and goes
to the tail note at the end of the prompt; the others stay in the note that ends the first user
turn. So no decision flips:
- on the family's first call nothing is known: a candidate its shape does not move stays, and so
  on every later call while its bytes stay the same;
- the call on which such a candidate or line first differs misses the cache from it on (as the bare
  client's does: its bytes changed there), and from the next call on the family's prompt is the
  same without it, call after call (a newly learnt line starts a new candidate record: a candidate
  learnt by memory alone is learnt once more, at the cost of that one miss);
- a value moved on sight that stays the same over an agent run costs the run nothing: it stands
  in the note that ends the first user turn, at the same place on every call of the run;
- a family not seen for `VOLATILE_FAMILIES` other records is forgotten (LRU), and starts over.
What is not watched: a line that changes as the first or the last line of its text (it names the
family). A call with no candidate at all is watched all the same: its run-time lines (a listing, a
working directory, a `git status` block) look like nothing, and are learnt as any other line.

The memory is bounded, locked (concurrent calls of one client are safe), and costs, per call with a
system prompt, the hashes of the masked texts and their lines (remembered per text) and one record's
update (two where the call has candidates).
"""

from __future__ import annotations

import difflib
import functools
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

from sdk._constants import (
    FAMILY_ID_HEX_CHARS,
    VOLATILE_FAMILIES,
    VOLATILE_LINES_TAUGHT_MIN,
    VOLATILE_LINES_TAUGHT_SHARE,
    VOLATILE_SCAN_CACHE_SIZE,
)
from sdk.memory.store import LocalStore, Store
from sdk.prompt.family_record import FAMILY_RECORDS, FamilyRecord


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


def next_lines_record(
    last: FamilyRecord | None, lines: tuple[int, ...], conversation: bytes, turns: int
) -> FamilyRecord:
    """The family's line record after a call with these `lines` (hashes): each line aligned with the
    last call's keeps its flags, and an inserted or replaced one has changed (see the module)."""
    if last is None or not last.values:  # a new family (or one only looked at: `FamilyMemory.changing_lines`)
        return FamilyRecord(lines, (False,) * len(lines), (False,) * len(lines), conversation, turns)
    if last.values == lines:  # the same lines: nothing to align
        return FamilyRecord(lines, last.changed, last.within, conversation, turns)
    changed, within = [False] * len(lines), [False] * len(lines)
    differ: list[tuple[int, bool]] = []  # (line, whether it had changed within a conversation)
    for tag, old, old_end, new, new_end in difflib.SequenceMatcher(None, last.values, lines, False).get_opcodes():
        if tag == "equal":
            changed[new:new_end], within[new:new_end] = last.changed[old:old_end], last.within[old:old_end]
        else:
            differ += [(line, any(last.within[old:old_end])) for line in range(new, new_end)]
    if len(differ) <= max(VOLATILE_LINES_TAUGHT_MIN, VOLATILE_LINES_TAUGHT_SHARE * len(lines)):
        same = last.conversation == conversation and turns > last.turns
        for line, was_within in differ:
            changed[line], within[line] = True, was_within or same
    return FamilyRecord(lines, tuple(changed), tuple(within), conversation, turns)


@dataclass(frozen=True, slots=True)
class SeenLines:
    """What the line memory says of one call (`FamilyMemory.observe_lines`): per system text, its lines
    that have changed between two calls of the family (they move, whole), each with whether it
    changed within a conversation (to the tail note), this call included; the key of the family's
    candidates (`family_key` of the masked texts without those lines); the family's id (its
    outline's hash, for the span); and the share of the system prompt's stable bytes (its lines
    that do not move) this call keeps from the family's previous call, as lines tell it (None on the
    family's first call)."""

    moving: list[dict[int, bool]]
    key: bytes
    family: str
    kept: float | None


def stable_kept(previous: FamilyRecord | None, record: FamilyRecord, lengths: Sequence[int]) -> float | None:
    """The share of this call's stable bytes (the lines `record` does not move; `lengths`: each
    line's, its newline included) sent, from the start, as the family's `previous` call sent them:
    the prefix this call keeps of the last one's. It ends at the first line that differs and stays,
    or that moves now where the previous call sent it in place (the call that learns a line misses
    from it on, as the bare client's does)."""
    if previous is None or not previous.values:
        return None
    total = sum(size for size, changed in zip(lengths, record.changed) if not changed)
    if not total or previous.values == record.values and previous.changed == record.changed:
        return 1.0  # the same lines, moved the same: the whole stable prefix kept
    kept = 0
    matcher = difflib.SequenceMatcher(None, previous.values, record.values, False)
    for tag, old, old_end, new, new_end in matcher.get_opcodes():
        if tag == "equal":
            for before, line in zip(range(old, old_end), range(new, new_end)):
                if record.changed[line] and not previous.changed[before]:
                    return kept / total
                kept += 0 if record.changed[line] else lengths[line]
        elif not all(previous.changed[old:old_end]) or not all(record.changed[new:new_end]):
            return kept / total  # a line that stays differs, or one that moves now was sent in place
    return kept / total


@functools.lru_cache(maxsize=VOLATILE_SCAN_CACHE_SIZE)
def line_lengths(masked: str) -> tuple[int, ...]:
    """The length of each line of a masked text, its newline included (a text's last has none),
    remembered per text as its hashes are."""
    lines = masked.split("\n")
    return tuple(len(line) + 1 for line in lines[:-1]) + (len(lines[-1]),)


@functools.lru_cache(maxsize=VOLATILE_SCAN_CACHE_SIZE)
def line_hashes(masked: str) -> tuple[int, ...]:
    """The hash of each line of a masked text (`value_hash`), remembered per text: a system prompt
    whose only changes are recognised values is hashed once."""
    return tuple(value_hash(line) for line in masked.split("\n"))


def family_outline(masked_system: Sequence[str], masked_tools: Sequence[str], model: str = "") -> bytes:
    """What finds a call's family (see the module): the model, the first and the last non-blank line
    of each masked system text, and the masked tool descriptions whole."""
    ends: list[str] = []
    for text in masked_system:
        lines = [line for line in text.split("\n") if line.strip()] or [""]
        ends += [lines[0], lines[-1]]
    return family_key(["\x01outline", model, *ends, "\x01tools", *masked_tools])


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
        self._store = store if store is not None else LocalStore(records=size)

    def observe(self, family: bytes, values: tuple[int, ...], conversation: bytes, turns: int = 1) -> Changes:
        """Record this call's candidates (`values`: the hash of each one's bytes, so no request id or
        token is kept), its `conversation` (a hash of its first user turn) and its number of `turns`;
        return, for each, whether it has differed between two calls of the family, and between two
        successive calls of one conversation (the same first turn, grown by turns: a run that starts
        over with the same request is another), this one included (all False on the family's first
        call: nothing is known yet)."""
        update = functools.partial(next_record, values=values, conversation=conversation, turns=turns)
        record = self._store.update_record(FAMILY_RECORDS, family, update)
        return Changes(record.changed, record.within)

    def observe_lines(
        self,
        masked_system: Sequence[str],
        masked_tools: Sequence[str],
        conversation: bytes,
        turns: int = 1,
        model: str = "",
    ) -> SeenLines:
        """Record this call's system lines (the masked texts', hashed) for its family (`family_outline`
        of them and the `model`); return what `SeenLines` holds."""
        hashes = [line_hashes(text) for text in masked_system]
        lines = tuple(h for text in hashes for h in text)
        last: list[FamilyRecord | None] = []

        def update(record: FamilyRecord | None) -> FamilyRecord:
            last.append(record)
            return next_lines_record(record, lines, conversation, turns)

        outline = family_outline(masked_system, masked_tools, model)
        record = self._store.update_record(FAMILY_RECORDS, outline, update)
        moving: list[dict[int, bool]] = []
        stable: list[str] = []
        position = 0
        for text, lines in zip(masked_system, hashes):
            end = position + len(lines)
            flags = zip(record.changed[position:end], record.within[position:end])
            moving.append({index: within for index, (changed, within) in enumerate(flags) if changed})
            stable.append("\n".join(line for index, line in enumerate(text.split("\n")) if index not in moving[-1]))
            position = end
        lengths = [size for text in masked_system for size in line_lengths(text)]
        kept = stable_kept(last[-1] if last else None, record, lengths)
        return SeenLines(moving, family_key([*stable, *masked_tools]), outline.hex()[:FAMILY_ID_HEX_CHARS], kept)

    def changing_lines(
        self, masked_system: Sequence[str], masked_tools: Sequence[str], model: str = ""
    ) -> list[dict[int, bool]]:
        """Per system text, the lines the family of these texts has shown changing (as `observe_lines`
        returns them), without recording a call: what `sdk.lint` names."""
        outline = family_outline(masked_system, masked_tools, model)
        record = self._store.update_record(FAMILY_RECORDS, outline, _looked_at)
        found: list[dict[int, bool]] = []
        position = 0
        for text in masked_system:
            end = position + text.count("\n") + 1
            flags = zip(record.changed[position:end], record.within[position:end])
            found.append({index: within for index, (changed, within) in enumerate(flags) if changed})
            position = end
        return found

    def __len__(self) -> int:
        return self._store.held(FAMILY_RECORDS.kind)


def _looked_at(record: FamilyRecord | None) -> FamilyRecord:
    """A family's record unchanged, or an empty one where there is none (a look records no call)."""
    return record if record is not None else FamilyRecord((), (), (), b"", 0)
