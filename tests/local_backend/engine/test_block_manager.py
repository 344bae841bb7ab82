"""Block pool bookkeeping: allocation, prefix hits by hash chain, reference counts, LRU eviction."""

from __future__ import annotations

import pytest

from local_backend.engine.block_manager import BlockManager, chain_hash
from local_backend.engine.sequence import Sequence
from local_backend.sampling.sampling_params import SamplingParams


def _seq(tokens: list[int], name: str = "r") -> Sequence:
    return Sequence(name, tokens, SamplingParams())


def _run(bm: BlockManager, seq: Sequence) -> int:
    """Admit a sequence and mark its whole prompt computed, as a finished prefill would."""
    reused = bm.allocate(seq)
    seq.num_computed_tokens = len(seq)
    bm.commit(seq, reused)
    return reused


def test_chain_hash_depends_on_the_parent_and_the_tokens():
    assert chain_hash(0, [1, 2]) == chain_hash(0, [1, 2])
    assert chain_hash(0, [1, 2]) != chain_hash(1, [1, 2])
    assert chain_hash(0, [1, 2]) != chain_hash(0, [2, 1])


def test_allocate_takes_one_block_per_started_block_of_tokens():
    bm = BlockManager(num_blocks=8, block_size=4)
    seq = _seq(list(range(10)))
    assert bm.can_allocate(seq)
    assert bm.allocate(seq) == 0
    assert len(seq.block_table) == 3 and bm.num_used == 3 and bm.num_free == 5


def test_second_sequence_reuses_the_full_computed_blocks_of_a_shared_prefix():
    bm = BlockManager(num_blocks=8, block_size=4)
    first = _seq(list(range(10)), "a")
    _run(bm, first)
    second = _seq(list(range(9)) + [99], "b")
    assert _run(bm, second) == 8
    assert second.block_table[:2] == first.block_table[:2]
    assert [bm.blocks[b].ref_count for b in first.block_table[:2]] == [2, 2]


def test_a_prompt_that_is_entirely_cached_still_computes_its_last_token():
    bm = BlockManager(num_blocks=8, block_size=4)
    _run(bm, _seq(list(range(8)), "a"))
    again = _seq(list(range(8)), "b")
    assert bm.allocate(again) == 4


def test_released_blocks_stay_cached_until_the_pool_needs_them():
    bm = BlockManager(num_blocks=4, block_size=4)
    first = _seq(list(range(9)), "a")
    _run(bm, first)
    bm.deallocate(first)
    assert (bm.num_used, bm.num_cached, bm.num_free) == (0, 2, 2)
    assert _run(bm, _seq(list(range(8)) + [50], "b")) == 8
    assert bm.num_cached == 0


def test_eviction_takes_the_least_recently_released_block_first():
    bm = BlockManager(num_blocks=3, block_size=2)
    old, new = _seq([1, 2, 3], "old"), _seq([4, 5, 6], "new")
    _run(bm, old)
    bm.deallocate(old)
    _run(bm, new)
    bm.deallocate(new)
    assert bm.num_cached == 2
    filler = _seq([7, 8, 9], "filler")  # 2 blocks: the free one, then old's cached one
    bm.allocate(filler)
    assert bm.num_cached == 1
    bm.deallocate(filler)
    again = _seq([4, 5, 6], "new again")
    assert bm.allocate(again) == 2
    bm.deallocate(again)
    assert bm.allocate(_seq([1, 2, 3], "old again")) == 0


def test_can_allocate_counts_cached_hits_as_not_needing_new_blocks():
    bm = BlockManager(num_blocks=3, block_size=2)
    first = _seq([1, 2, 3, 4, 5], "a")
    _run(bm, first)
    bm.deallocate(first)  # 2 cached ([1,2], [3,4]) + the partial block free
    assert bm.can_allocate(_seq([1, 2, 3, 4, 9], "b"))
    assert not bm.can_allocate(_seq([7, 7, 7, 7, 7, 7, 7], "c"))


def test_append_adds_a_block_only_when_the_last_one_is_full():
    bm = BlockManager(num_blocks=4, block_size=2)
    seq = _seq([1, 2, 3])
    bm.allocate(seq)
    seq.token_ids.append(4)
    assert bm.can_append(seq)
    bm.append(seq)
    assert len(seq.block_table) == 2
    seq.token_ids.append(5)
    bm.append(seq)
    assert len(seq.block_table) == 3


def test_can_append_is_false_when_the_pool_is_exhausted():
    bm = BlockManager(num_blocks=1, block_size=2)
    seq = _seq([1, 2])
    bm.allocate(seq)
    seq.token_ids.append(3)
    assert not bm.can_append(seq)


def test_deallocating_twice_trips_the_reference_count_invariant():
    bm = BlockManager(num_blocks=2, block_size=2)
    seq = _seq([1])
    bm.allocate(seq)
    table = seq.block_table
    bm.deallocate(seq)
    seq.block_table = table
    with pytest.raises(AssertionError, match="released more often"):
        bm.deallocate(seq)


def test_a_pool_without_blocks_is_refused():
    with pytest.raises(ValueError, match="num_blocks=0"):
        BlockManager(num_blocks=0, block_size=16)


def test_a_cache_salt_renames_the_whole_chain_so_another_salt_never_hits():
    bm = BlockManager(num_blocks=16, block_size=4)
    tokens = list(range(13))
    _run(bm, Sequence("a", tokens, SamplingParams(), cache_salt="tenant-a"))
    assert _run(bm, Sequence("b", tokens, SamplingParams(), cache_salt="tenant-b")) == 0
    assert _run(bm, Sequence("c", tokens, SamplingParams())) == 0
    assert _run(bm, Sequence("d", tokens, SamplingParams(), cache_salt="tenant-a")) == 12
    salted = Sequence("e", tokens, SamplingParams(), cache_salt="tenant-a")
    plain = Sequence("f", tokens, SamplingParams())
    assert all(x != y for x, y in zip(bm._hashes(salted), bm._hashes(plain)))


def test_cache_written_tokens_count_the_prompt_blocks_a_sequence_named_first():
    bm = BlockManager(num_blocks=16, block_size=4)
    first = _seq(list(range(10)), "a")
    _run(bm, first)
    assert first.num_cache_written_tokens == 8  # two full prompt blocks; the third is partial
    second = _seq(list(range(14)), "b")
    assert _run(bm, second) == 8
    assert second.num_cache_written_tokens == 4  # only block 2 is new
    for seq in (first, second):
        bm.deallocate(seq)
    bm.reset_prefix_cache()
    twins = [_seq(list(range(14)), name) for name in "cd"]
    for seq in twins:  # both admitted before either commits: both compute the same blocks
        bm.allocate(seq)
    for seq in twins:
        seq.num_computed_tokens = len(seq)
        bm.commit(seq, 0)
    assert [seq.num_cache_written_tokens for seq in twins] == [12, 0]


def test_blocks_recomputed_after_preemption_are_not_counted_as_written_twice():
    bm = BlockManager(num_blocks=16, block_size=4)
    seq = _seq(list(range(10)), "a")
    _run(bm, seq)
    bm.deallocate(seq)  # preempted: its blocks stay cached, then the pool forgets them
    bm.reset_prefix_cache()
    seq.num_computed_tokens = 0
    _run(bm, seq)
    assert seq.num_cache_written_tokens == 8
