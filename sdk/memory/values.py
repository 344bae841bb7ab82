"""What a value in the shared state store must be to be read back (`sdk.memory.redis_store`).

Every value read from the store is checked here before kvwise uses it: another process, an older
kvwise, an operator or an attacker may have written it. A value that is not JSON, of the wrong
type, of the wrong length or too large raises `_Malformed` (kvwise's own: it never reaches a
caller), naming its key's kind; the store then drops it and the call goes on as if it had not
been there, its span saying why (`kvwise.state.degraded_reason`, e.g. "malformed family value: not JSON").
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

from sdk._constants import ADAPTIVE_CAP_WINDOW, STATE_MAX_OUTPUT_TOKENS, STATE_MAX_VALUE_BYTES
from sdk.memory.records import Seen, Segment

_SEGMENT_FIELDS = 5  # key, chain, tool, kept_sorted, kept_masked


class _Malformed(ValueError):
    """A stored value of key kind `kind` ("family", "lengths", "cuts", "seen", "latest") is unusable: `why`."""

    def __init__(self, kind: str, why: str) -> None:
        super().__init__(f"malformed {kind} value: {why}")
        self.kind, self.why = kind, why

    @property
    def reason(self) -> str:
        """`kvwise.state.degraded_reason` of a call that found it."""
        return str(self)


def parse_json(kind: str, stored: bytes) -> Any:
    """`stored` as JSON, else `_Malformed` (too large, or not JSON)."""
    if len(stored) > STATE_MAX_VALUE_BYTES:
        raise _Malformed(kind, f"too large ({len(stored)} bytes, at most {STATE_MAX_VALUE_BYTES})")
    try:
        return json.loads(stored)
    except ValueError:  # UnicodeDecodeError included
        raise _Malformed(kind, "not JSON") from None


def require(kind: str, ok: bool, why: str) -> None:
    """`_Malformed` for `why` unless `ok`."""
    if not ok:
        raise _Malformed(kind, why)


def is_int(value: Any, low: int, high: int) -> bool:
    """Whether `value` is an int (not a bool) in `[low, high)`."""
    return isinstance(value, int) and not isinstance(value, bool) and low <= value < high


def json_list(kind: str, value: Any, length: int | None = None) -> list[Any]:
    """`value` if it is a list (of `length` items, where given), else `_Malformed`."""
    require(kind, isinstance(value, list), "wrong type")
    require(kind, length is None or len(value) == length, "wrong length")
    return value  # type: ignore[no-any-return]


def hex_bytes(kind: str, value: Any) -> bytes:
    """`value` (a hex string) as bytes, else `_Malformed`."""
    require(kind, isinstance(value, str), "wrong type")
    try:
        return bytes.fromhex(value)
    except ValueError:
        raise _Malformed(kind, "wrong type") from None


def checked_value(value: str) -> str:
    """`value` (`Store.update_value`), if it is short enough to keep; else a `ValueError` (kvwise's own mistake)."""
    if len(value) > STATE_MAX_VALUE_BYTES:
        raise ValueError(f"a stored value is at most {STATE_MAX_VALUE_BYTES} characters, got {len(value)}")
    return value


def decode_counts(kind: str, items: Sequence[bytes], high: int) -> list[int]:
    """A workload's list (`lengths`: output lengths; `cuts`: 0 or 1 each), newest first, else `_Malformed`."""
    require(kind, len(items) <= ADAPTIVE_CAP_WINDOW, "wrong length")
    require(kind, sum(map(len, items)) <= STATE_MAX_VALUE_BYTES, "too large")
    counts = [parse_json(kind, item) for item in items]
    require(kind, all(is_int(count, 0, high) for count in counts), "wrong type")
    return counts


def decode_lengths(items: Sequence[bytes]) -> list[int]:
    return decode_counts("lengths", items, STATE_MAX_OUTPUT_TOKENS)


def decode_cuts(items: Sequence[bytes]) -> list[int]:
    return decode_counts("cuts", items, 2)


def encode_seen(seen: Seen) -> str:
    chain = [[s.key, s.chain, s.tool, s.kept_sorted, s.kept_masked] for s in seen.chain]
    return json.dumps({"model": seen.model, "chain": chain, "settings": list(seen.settings), "at": seen.at})


def decode_seen(kind: str, fields: Mapping[bytes, bytes]) -> Seen:
    """A call's record as `encode_seen` wrote it under a `seen` or `latest` key, else `_Malformed`."""
    stored, message_id = fields.get(b"seen"), fields.get(b"id")
    require(kind, stored is not None, "wrong type")
    record = parse_json(kind, stored or b"")
    require(kind, isinstance(record, dict) and isinstance(record.get("model"), str), "wrong type")
    at = record.get("at")
    require(kind, isinstance(at, (int, float)) and not isinstance(at, bool) and math.isfinite(at), "wrong type")
    settings = json_list(kind, record.get("settings"))
    require(kind, all(isinstance(setting, str) for setting in settings), "wrong type")
    chain = []
    for entry in json_list(kind, record.get("chain")):
        key, hashed, tool, kept_sorted, kept_masked = json_list(kind, entry, _SEGMENT_FIELDS)
        require(kind, isinstance(key, str) and isinstance(hashed, str), "wrong type")
        require(
            kind, all(part is None or isinstance(part, str) for part in (tool, kept_sorted, kept_masked)), "wrong type"
        )
        chain.append(Segment(key, hashed, None, tool, kept_sorted, kept_masked))
    answer_id: str | None = None
    if message_id is not None:
        require(kind, len(message_id) <= STATE_MAX_VALUE_BYTES, "too large")
        try:
            answer_id = message_id.decode()
        except UnicodeDecodeError:
            raise _Malformed(kind, "wrong type") from None
    return Seen(record["model"], chain, tuple(settings), float(at), answer_id)
