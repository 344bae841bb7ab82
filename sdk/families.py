"""Which volatile-looking bytes really change between calls: a memory per wrapped client.

A UUID, a date with a time or a long hex string in a system prompt *looks* volatile, but a project
id or a schema's example timestamp is the same on every call: moving it would change what the
prompt says and gain nothing. Only calls can tell, so each wrapped client remembers, per prompt
family, the candidate bytes of the family's last call (as hashes: no id or token is kept).

A prompt family is the calls whose stable texts (system prompt, tool descriptions) are the same once
every candidate is masked (`mask_volatile`): "Request ID: <Request ID>\\nFile tickets in project
<uuid>." is one family whatever the id and the project. For each family:
- on its first call every candidate counts as changing: it moves (a request id is moved from the
  first call, so the second call already reads the cache the first one wrote);
- on each later call, a candidate counts as changing once its bytes have differed from the
  previous call's, and from then on for good; bytes that never differed stay where the caller put
  them, from the family's second call on (that call reads the cache from the system prompt on
  only, once);
- a family not seen for `VOLATILE_FAMILIES` other families is forgotten (LRU), and starts over.

The memory is bounded, locked (concurrent calls of one client are safe), and costs one hash of the
masked texts and a dictionary look-up per call that has candidates; a call without any costs nothing.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from sdk._constants import VOLATILE_FAMILIES


@dataclass(frozen=True, slots=True)
class _Family:
    values: tuple[int, ...]  # hashes of the candidates' bytes on the family's last call, in order
    changed: tuple[bool, ...]  # which have ever differed from one call to the next


def family_key(masked: Sequence[str]) -> bytes:
    """The family of a call whose stable texts, candidates masked, are `masked` (in order)."""
    digest = hashlib.blake2b(digest_size=16)
    for text in masked:
        digest.update(text.encode("utf-8", "surrogatepass"))
        digest.update(b"\x00")
    return digest.digest()


class FamilyMemory:
    """Per wrapped client: the candidate bytes of each prompt family's last call (see the module).

    >>> memory = FamilyMemory()
    >>> memory.changing(key, (hash("req-1"), hash("project-a"))) is None   # the family's first call
    True
    >>> memory.changing(key, (hash("req-2"), hash("project-a")))
    (True, False)
    """

    def __init__(self, size: int = VOLATILE_FAMILIES) -> None:
        if size < 1:
            raise ValueError(f"FamilyMemory size must be at least 1, got {size!r}")
        self._size = size
        self._families: OrderedDict[bytes, _Family] = OrderedDict()
        self._lock = threading.Lock()

    def changing(self, family: bytes, values: tuple[int, ...]) -> tuple[bool, ...] | None:
        """Record this call's candidates (`values`: the hash of each one's bytes, so no request id or
        token is kept); return, for each, whether it changes between calls, or None on the family's
        first call (nothing is known yet)."""
        with self._lock:
            last = self._families.pop(family, None)  # re-inserted below: the most recently used
            if last is None or len(last.values) != len(values):
                self._families[family] = _Family(values, (False,) * len(values))
                if len(self._families) > self._size:
                    self._families.popitem(last=False)
                return None
            changed = tuple(seen or old != new for seen, old, new in zip(last.changed, last.values, values))
            self._families[family] = _Family(values, changed)
            return changed

    def __len__(self) -> int:
        with self._lock:
            return len(self._families)
