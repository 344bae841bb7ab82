"""Step planning: continuous batching, chunked prefill under a token budget, preemption."""

from __future__ import annotations

import pytest

from local_backend.engine.block_manager import BlockManager
from local_backend.engine.request import Request
from local_backend.engine.scheduler import ScheduleFailed, Scheduler
from local_backend.engine.sequence import Sequence, Status
from local_backend.sampling.sampling_params import SamplingParams


def _scheduler(num_blocks: int = 16, block_size: int = 4, max_num_seqs: int = 8, budget: int = 64) -> Scheduler:
    return Scheduler(BlockManager(num_blocks, block_size), max_num_seqs, budget)


def _seq(name: str, length: int) -> Sequence:
    """Distinct tokens per name, so no prefix is shared by accident."""
    return Sequence(name, [ord(name) * 100 + i for i in range(length)], SamplingParams())


def _step(scheduler: Scheduler, next_token: int = 7) -> dict[str, int]:
    """Plan a step, pretend to run it, append a token to each sequence that sampled."""
    batch = scheduler.schedule()
    for seq in scheduler.update(batch):
        seq.token_ids.append(next_token)
    return {seq.request_id: n for seq, n in zip(batch.seqs, batch.num_new_tokens)}


def test_waiting_prompts_are_admitted_and_prefilled_in_one_step():
    s = _scheduler()
    s.add(_seq("a", 5))
    s.add(_seq("b", 3))
    assert _step(s) == {"a": 5, "b": 3}
    assert [q.request_id for q in s.running] == ["a", "b"]


def test_running_sequences_decode_one_token_per_step():
    s = _scheduler()
    s.add(_seq("a", 5))
    _step(s)
    assert _step(s) == {"a": 1}


def test_a_new_request_joins_between_decode_steps():
    s = _scheduler()
    s.add(_seq("a", 5))
    _step(s)
    s.add(_seq("b", 6))
    assert _step(s) == {"a": 1, "b": 6}


def test_a_long_prompt_is_prefilled_in_chunks_within_the_token_budget():
    s = _scheduler(budget=4)
    s.add(_seq("a", 10))
    assert _step(s) == {"a": 4}
    assert _step(s) == {"a": 4}
    seq = s.running[0]
    assert len(seq) == 10  # nothing sampled before the prompt is done
    assert _step(s) == {"a": 2}
    assert len(seq) == 11


def test_decodes_are_served_before_new_prefills_take_the_rest_of_the_budget():
    s = _scheduler(budget=6)
    s.add(_seq("a", 3))
    _step(s)
    s.add(_seq("b", 20))
    assert _step(s) == {"a": 1, "b": 5}


def test_max_num_seqs_caps_the_running_set():
    s = _scheduler(max_num_seqs=2)
    for name in "abc":
        s.add(_seq(name, 2))
    assert set(_step(s)) == {"a", "b"}
    assert [q.request_id for q in s.waiting] == ["c"]


def test_the_newest_sequence_is_preempted_when_blocks_run_out_and_recomputed_later():
    s = _scheduler(num_blocks=4, block_size=2)
    s.add(_seq("a", 4))
    s.add(_seq("b", 4))
    _step(s)  # a and b hold 2 blocks each; both sampled a 5th token
    plan = _step(s)  # a needs a third block: b is preempted to give it one
    assert plan == {"a": 1}
    assert s.num_preemptions == 1
    b = s.waiting[0]
    assert (b.request_id, b.status, b.num_computed_tokens, b.block_table) == ("b", Status.WAITING, 0, [])
    assert len(b) == 5  # its sampled token is kept and recomputed


def test_a_prompt_sharing_computed_blocks_skips_them():
    s = _scheduler()
    s.add(Sequence("a", list(range(9)), SamplingParams()))
    _step(s)
    s.add(Sequence("b", list(range(8)) + [42, 43], SamplingParams()))
    assert _step(s) == {"a": 1, "b": 2}
    assert s.running[1].num_cached_tokens == 8


def test_finish_releases_the_blocks_of_running_and_forgets_waiting_sequences():
    s = _scheduler(max_num_seqs=1)
    s.add(_seq("a", 3))
    s.add(_seq("b", 3))
    _step(s)
    a, b = s.running[0], s.waiting[0]
    s.finish(a)
    s.finish(b)
    assert not s.has_unfinished()
    assert s.block_manager.num_used == 0
    assert a.status is b.status is Status.FINISHED


def test_preemption_mid_chunked_prefill_leaves_only_the_computed_blocks_named():
    s = _scheduler(num_blocks=7, block_size=4, budget=4)
    s.add(_seq("a", 4))
    _step(s)  # a: 4 prompt tokens computed, a 5th sampled
    s.add(_seq("b", 20))  # 5 blocks, prefilled 3 tokens a step beside a's decodes
    plans = [_step(s) for _ in range(4)]
    assert plans == [{"a": 1, "b": 3}] * 4
    b = s.running[1]
    assert b.num_computed_tokens == 12  # blocks 0-2 computed; blocks 3-4 hold tokens, no KV yet
    assert _step(s) == {"a": 1}  # a needs a third block: b is preempted in the middle of its prefill
    assert (b.status, b.block_table, s.num_preemptions) == (Status.WAITING, [], 1)
    s.finish(s.running[0])
    _step(s)  # b comes back: only its computed blocks are found in the prefix cache
    assert b.num_computed_tokens == 12 + 4
    assert s.block_manager.hit_tokens == 12


def test_a_failed_admission_leaves_the_sequence_waiting_and_the_pool_untouched():
    s = _scheduler()
    s.add(_seq("a", 5))
    allocate = s.block_manager.allocate

    def failing(seq):
        raise RuntimeError("injected")

    s.block_manager.allocate = failing  # type: ignore[method-assign]
    with pytest.raises(ScheduleFailed) as failure:
        s.schedule()
    assert failure.value.seq is s.waiting[0] and isinstance(failure.value.__cause__, RuntimeError)
    assert [q.request_id for q in s.waiting] == ["a"] and not s.running
    assert s.block_manager.num_used == 0
    s.block_manager.allocate = allocate  # type: ignore[method-assign]
    s.finish(s.waiting[0])
    assert not s.has_unfinished()


class _Silent:
    """A detokenizer that never matches a stop string and shows no text."""

    def add(self, token_id: int) -> bool:
        return False

    def take_delta(self, final: bool) -> str:
        return ""


def _request(seq: Sequence, deltas: list) -> Request:
    return Request(seq, _Silent(), deltas.append)


def test_update_from_output_appends_emits_and_ends_a_stopped_sequence_with_its_blocks_freed():
    s = Scheduler(BlockManager(16, 4), 8, 64, eos=frozenset({2}))
    a, b = _seq("a", 5), _seq("b", 3)
    deltas: list = []
    requests = {a: _request(a, deltas), b: _request(b, deltas)}
    s.add(a)
    s.add(b)
    out = s.update_from_output(s.schedule(), {a: [7], b: [2]}, requests)
    assert out.new_token_ids == {"a": (7,), "b": (2,)} and out.num_generated == 2
    assert [(e.seq, e.reason, e.new_tokens, e.error) for e in out.ended] == [(b, "stop", (2,), None)]
    assert a.output_token_ids == [7] and b.output_token_ids == [2]
    assert [d.token_ids for d in deltas] == [(7,)]  # the ended one's last delta is the core's to send
    assert s.running == [a] and b.status is Status.FINISHED and not b.block_table


def test_update_from_output_ends_at_max_tokens_and_at_max_model_len():
    s = Scheduler(BlockManager(16, 4), 8, 64, max_model_len=7)
    capped = Sequence("c", [1, 2, 3], SamplingParams(max_tokens=1))
    long = _seq("l", 6)
    requests = {capped: _request(capped, []), long: _request(long, [])}
    s.add(capped)
    s.add(long)
    out = s.update_from_output(s.schedule(), {capped: [9], long: [9]}, requests)
    assert [(e.seq.request_id, e.reason) for e in out.ended] == [("c", "length"), ("l", "length")]
    assert not s.has_unfinished()


def test_update_from_output_reports_a_failed_delivery_and_goes_on():
    s = _scheduler()
    a, b = _seq("a", 3), _seq("b", 3)

    def broken(delta: object) -> None:
        raise RuntimeError("sink closed")

    requests = {a: Request(a, _Silent(), broken), b: _request(b, [])}
    s.add(a)
    s.add(b)
    out = s.update_from_output(s.schedule(), {a: [7], b: [7]}, requests)
    [failed] = out.ended
    assert failed.seq is a and isinstance(failed.error, RuntimeError)
    assert b.output_token_ids == [7] and s.running == [a, b]  # the caller fails `a`
