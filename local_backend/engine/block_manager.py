"""Bookkeeping of the KV block pool: allocation, reference counts, and the prefix cache.

A full block whose KV is computed is named by a hash chain, h_i = H(h_{i-1}, tokens of block i), so
equal names mean equal prefixes. The chain starts at h_{-1} = root(cache_salt): 0 without a salt,
else a hash of it, so sequences with different salts (tenants) never share a block, and one can
never get a cache hit, or a faster first token, from another's prompt (vLLM's `cache_salt`). A
sequence admitted with a prompt whose leading blocks are already named reuses them (reference count
+ 1) instead of computing them. A block whose count drops to 0 keeps its name and KV as "cached"
until the pool needs it: cached blocks are evicted least recently released first. With prefix
caching off (`enable_prefix_caching=False`) no block is ever named: a released block is free at
once, and every prompt is computed in full. No tensors here; the model runner owns the cache itself.
"""

from __future__ import annotations

import hashlib
from array import array
from collections import OrderedDict, deque
from collections.abc import Sequence as Seq

from local_backend._constants import HASH_DIGEST_BYTES, SALT_PERSON
from local_backend.engine.sequence import Sequence


def chain_hash(parent: int, tokens: Seq[int]) -> int:
    """H(parent, tokens): blake2b over the parent's name and the block's token ids."""
    digest = hashlib.blake2b(parent.to_bytes(HASH_DIGEST_BYTES, "little"), digest_size=HASH_DIGEST_BYTES)
    digest.update(array("q", tokens).tobytes())
    return int.from_bytes(digest.digest(), "little")


def chain_root(cache_salt: str | None) -> int:
    """The parent of a sequence's first block: 0 without a salt, else blake2b of the salt."""
    if cache_salt is None:
        return 0
    digest = hashlib.blake2b(cache_salt.encode(), digest_size=HASH_DIGEST_BYTES, person=SALT_PERSON)
    return int.from_bytes(digest.digest(), "little")


class Block:
    __slots__ = ("block_id", "ref_count", "hash", "token_ids")

    def __init__(self, block_id: int):
        self.block_id = block_id
        self.ref_count = 0
        self.hash: int | None = None
        self.token_ids: tuple[int, ...] = ()


class BlockManager:
    """`num_blocks` blocks of `block_size` tokens; `can_allocate`/`allocate`, `can_append`/`append`.

    Every block is in exactly one state: used (ref_count > 0), cached (ref_count 0, named, in LRU
    order) or free (ref_count 0, unnamed).
    """

    def __init__(self, num_blocks: int, block_size: int, enable_prefix_caching: bool = True):
        if num_blocks < 1:
            raise ValueError(f"num_blocks={num_blocks} must be >= 1: raise the KV cache memory")
        self.block_size = block_size
        self.enable_prefix_caching = enable_prefix_caching
        self.blocks = [Block(i) for i in range(num_blocks)]
        self._free: deque[int] = deque(range(num_blocks))
        self._cached: OrderedDict[int, None] = OrderedDict()
        self._by_hash: dict[int, int] = {}
        self.hit_tokens = 0

    @property
    def num_blocks(self) -> int:
        return len(self.blocks)

    @property
    def num_free(self) -> int:
        return len(self._free)

    @property
    def num_cached(self) -> int:
        return len(self._cached)

    @property
    def num_used(self) -> int:
        return self.num_blocks - self.num_free - self.num_cached

    def _hashes(self, seq: Sequence) -> list[int]:
        """Names of the sequence's full blocks, extended as tokens arrive."""
        size = self.block_size
        for i in range(len(seq.block_hashes), len(seq) // size):
            parent = seq.block_hashes[-1] if seq.block_hashes else chain_root(seq.cache_salt)
            seq.block_hashes.append(chain_hash(parent, seq.token_ids[i * size : (i + 1) * size]))
        return seq.block_hashes

    def _prefix_hits(self, seq: Sequence) -> list[int]:
        """Cached block ids matching the sequence's leading full blocks (never its last token)."""
        size = self.block_size
        hits: list[int] = []
        if not self.enable_prefix_caching:
            return hits
        for i, h in enumerate(self._hashes(seq)[: (len(seq) - 1) // size]):
            block_id = self._by_hash.get(h)
            tokens = tuple(seq.token_ids[i * size : (i + 1) * size])
            if block_id is None or self.blocks[block_id].token_ids != tokens:
                break
            hits.append(block_id)
        return hits

    def can_allocate(self, seq: Sequence) -> bool:
        return self._fits(seq, self._prefix_hits(seq))

    def _fits(self, seq: Sequence, hits: list[int]) -> bool:
        reclaimed = sum(1 for b in hits if b in self._cached)
        needed = seq.num_blocks_needed(self.block_size) - len(hits)
        return needed <= self.num_free + self.num_cached - reclaimed

    def allocate(self, seq: Sequence) -> int:
        """Give the sequence blocks for all its tokens, reusing cached ones; return tokens reused."""
        assert not seq.block_table, f"{seq.request_id} already holds blocks"
        hits = self._prefix_hits(seq)
        if not self._fits(seq, hits):  # checked first, so a refusal changes nothing
            raise RuntimeError(f"no room for {seq.request_id}: call can_allocate first")
        for block_id in hits:
            block = self.blocks[block_id]
            if block.ref_count == 0:
                del self._cached[block_id]
            block.ref_count += 1
        seq.block_table = hits + [self._take() for _ in range(seq.num_blocks_needed(self.block_size) - len(hits))]
        reused = len(hits) * self.block_size
        self.hit_tokens += reused
        return reused

    def _blocks_short(self, seq: Sequence, lookahead: int) -> int:
        """Blocks the sequence lacks for its tokens and `lookahead` more (speculative drafts)."""
        return -(-(len(seq) + lookahead) // self.block_size) - len(seq.block_table)

    def can_append(self, seq: Sequence, lookahead: int = 0) -> bool:
        """Whether the pool has the block(s) the sequence's newest tokens (and `lookahead` drafts) need."""
        return self._blocks_short(seq, lookahead) <= self.num_free + self.num_cached

    def append(self, seq: Sequence, lookahead: int = 0) -> None:
        for _ in range(self._blocks_short(seq, lookahead)):
            seq.block_table.append(self._take())

    def release_tail(self, seq: Sequence) -> None:
        """Free the blocks past the sequence's tokens: they held only refused drafts (never named)."""
        keep = seq.num_blocks_needed(self.block_size)
        for block_id in reversed(seq.block_table[keep:]):
            block = self.blocks[block_id]
            assert block.ref_count == 1 and block.hash is None, f"block {block_id} past the tokens is shared or named"
            block.ref_count = 0
            self._free.append(block_id)
        del seq.block_table[keep:]

    def commit(self, seq: Sequence, computed_before: int) -> None:
        """Name the blocks that became full and computed since `computed_before` tokens.

        A block is named unless its name is already taken (another sequence computed the same
        prefix). Prompt blocks this sequence names the first time it offers them add to
        `seq.num_cache_written_tokens`. Without prefix caching nothing is named.
        """
        if not self.enable_prefix_caching:
            return
        size = self.block_size
        hashes = self._hashes(seq)
        full = seq.num_computed_tokens // size
        for i in range(computed_before // size, full):
            block = self.blocks[seq.block_table[i]]
            if block.hash is None and hashes[i] not in self._by_hash:
                block.hash = hashes[i]
                block.token_ids = tuple(seq.token_ids[i * size : (i + 1) * size])
                self._by_hash[block.hash] = block.block_id
                if seq.num_offered_blocks <= i < seq.num_prompt_tokens // size:
                    seq.num_cache_written_tokens += size
        seq.num_offered_blocks = max(seq.num_offered_blocks, full)

    def deallocate(self, seq: Sequence) -> None:
        """Release the sequence's blocks, last first, so a chain's tail is evicted before its head."""
        for block_id in reversed(seq.block_table):
            block = self.blocks[block_id]
            assert block.ref_count > 0, f"block {block_id} released more often than taken"
            block.ref_count -= 1
            if block.ref_count == 0:
                if block.hash is None:
                    self._free.append(block_id)
                else:
                    self._cached[block_id] = None
        seq.block_table = []

    def _take(self) -> int:
        """A free block, else the least recently released cached one (forgetting its name)."""
        if self._free:
            block_id = self._free.popleft()
        else:
            block_id, _ = self._cached.popitem(last=False)
            block = self.blocks[block_id]
            del self._by_hash[block.hash]  # type: ignore[arg-type]
            block.hash, block.token_ids = None, ()
        block = self.blocks[block_id]
        assert block.ref_count == 0, f"block {block_id} taken while in use"
        block.ref_count = 1
        return block_id

    def reset_prefix_cache(self) -> None:
        """Forget every cached block (used ones keep their names until released)."""
        for block_id in self._cached:
            block = self.blocks[block_id]
            del self._by_hash[block.hash]  # type: ignore[arg-type]
            block.hash, block.token_ids = None, ()
            self._free.append(block_id)
        self._cached.clear()
