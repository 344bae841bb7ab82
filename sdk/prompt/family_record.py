"""What `sdk.prompt.families` remembers of a family, and how a store outside the process keeps it.

The store (`sdk.memory`) knows no family: it keeps these records of kind "family" as the text
`FAMILY_RECORDS` writes, and reads them back through it, checked, since another process, an older
kvwise, an operator or an attacker may have written them. The text is part of the stored layout
(`sdk.memory.sqlite_link`, `sdk.memory.redis_store`): it must read what earlier versions wrote.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from sdk.memory.values import hex_bytes, is_int, json_list, parse_json, require

_HASH_LIMIT = 1 << 64  # a candidate's hash is 64 bits (`sdk.prompt.families.value_hash`)


@dataclass(frozen=True, slots=True)
class FamilyRecord:
    """What is remembered of a prompt family's last call (`sdk.prompt.families`): hashes and flags only."""

    values: tuple[int, ...]  # hashes of the candidates' bytes on the family's last call, in order
    changed: tuple[bool, ...]  # which have ever differed from one call to the next
    within: tuple[bool, ...]  # which have ever differed from the previous call of the same conversation
    conversation: bytes  # the hash of the last call's first user turn
    turns: int  # how many turns the last call sent


class _FamilyRecords:
    """The `sdk.memory.store.Codec` of family records."""

    kind = "family"

    def encode(self, record: FamilyRecord) -> str:
        flags = [int(c) for c in record.changed], [int(w) for w in record.within]
        return json.dumps([list(record.values), *flags, record.conversation.hex(), record.turns])

    def decode(self, stored: bytes) -> FamilyRecord:
        """A family's record as `encode` wrote it, else the store's malformed-value error (its checks raise it)."""
        kind = self.kind
        values, changed, within, conversation, turns = json_list(kind, parse_json(kind, stored), 5)
        values, changed, within = (json_list(kind, part) for part in (values, changed, within))
        require(kind, len(changed) == len(values) == len(within), "wrong length")
        require(kind, all(is_int(v, 0, _HASH_LIMIT) for v in values), "wrong type")
        require(kind, all(flag in (0, 1) and not isinstance(flag, float) for flag in (*changed, *within)), "wrong type")
        require(kind, isinstance(conversation, str) and is_int(turns, 0, _HASH_LIMIT), "wrong type")
        hashed = hex_bytes(kind, conversation)
        return FamilyRecord(tuple(values), tuple(map(bool, changed)), tuple(map(bool, within)), hashed, turns)


FAMILY_RECORDS = _FamilyRecords()
"""How family records are kept in a store."""
