"""A request's life whatever goes wrong: failed steps, reused ids, closing with streams in flight.

Every stream here is awaited under a generous guard (`GUARD_SECONDS`), so an engine that loses a
request fails the test instead of hanging it; no assertion depends on how long anything took.
"""

from __future__ import annotations

import asyncio
from contextlib import aclosing

import pytest

from local_backend import Engine, SamplingParams, StreamDelta
from local_backend.engine.detokenizer import Detokenizer
from local_backend.engine.request import Request
from local_backend.engine.sequence import Sequence

GUARD_SECONDS = 120.0
GREEDY = SamplingParams(max_tokens=12, temperature=0, ignore_eos=True)
LONG = SamplingParams(max_tokens=200, temperature=0, ignore_eos=True)


async def _drain(stream) -> list[StreamDelta]:
    async def run() -> list[StreamDelta]:
        async with aclosing(stream) as deltas:
            return [delta async for delta in deltas]

    return await asyncio.wait_for(run(), GUARD_SECONDS)


def _idle(engine: Engine) -> bool:
    engine.step()
    stats = engine.stats()
    return stats.num_running == stats.num_waiting == stats.blocks_used == 0


async def test_a_scheduling_error_fails_only_its_request_and_every_stream_still_ends(make_engine, monkeypatch):
    engine = make_engine()
    prompts = {"good-1": "Hello world", "bad": "The quick brown fox", "good-2": "A KV cache"}
    expected = dict(zip(prompts, engine.generate(list(prompts.values()), GREEDY)))
    allocate = engine.block_manager.allocate

    def failing_allocate(seq):
        if seq.request_id == "bad":
            raise RuntimeError("injected allocation failure")
        return allocate(seq)

    monkeypatch.setattr(engine.block_manager, "allocate", failing_allocate)
    results = await asyncio.gather(*(_drain(engine.stream(p, GREEDY, request_id=rid)) for rid, p in prompts.items()))
    finals = {rid: deltas[-1].completion for rid, deltas in zip(prompts, results)}
    assert finals["bad"].finish_reason == "error"
    assert "RuntimeError: injected allocation failure" in finals["bad"].error
    for rid in ("good-1", "good-2"):
        assert finals[rid].finish_reason == "length" and finals[rid].error is None
        assert finals[rid].token_ids == expected[rid].token_ids
    later = await _drain(engine.stream("Hello world", GREEDY))
    assert later[-1].completion.token_ids == expected["good-1"].token_ids
    assert _idle(engine)


def test_a_failure_inside_a_step_fails_only_that_batch_and_the_engine_keeps_serving(make_engine, monkeypatch):
    engine = make_engine(max_num_seqs=1)  # one request per batch: the second is not in the failing one
    doomed, spared = [5, 6, 7, 8, 9], [40, 41, 42]
    [want] = engine.generate([spared], GREEDY)
    run = engine.runner.run
    calls = {"failed": 0}

    def failing_run(batch):
        if any(seq.prompt_token_ids == doomed for seq in batch.seqs) and not calls["failed"]:
            calls["failed"] += 1
            raise ValueError("injected model failure")
        return run(batch)

    monkeypatch.setattr(engine.runner, "run", failing_run)
    failed, served = engine.generate([doomed, spared], GREEDY)
    assert (failed.finish_reason, failed.token_ids) == ("error", ())
    assert failed.error == "engine step failed: ValueError: injected model failure"
    assert served.finish_reason == "length" and served.token_ids == want.token_ids
    [again] = engine.generate([doomed], GREEDY)
    assert again.finish_reason == "length" and len(again.token_ids) == GREEDY.max_tokens
    assert calls["failed"] == 1 and _idle(engine)


async def test_a_reused_request_id_never_aborts_the_new_request(make_engine):
    engine = make_engine()
    old = engine.stream("Hello world", SamplingParams(max_tokens=2, temperature=0, ignore_eos=True), request_id="same")
    while (await asyncio.wait_for(old.__anext__(), GUARD_SECONDS)).completion is None:
        pass
    new = engine.stream("Hello world", GREEDY, request_id="same")  # the id is free again
    first = await asyncio.wait_for(new.__anext__(), GUARD_SECONDS)
    await old.aclose()  # the old stream's cleanup runs only now, with the id in use by `new`
    rest = await _drain(new)
    completion = rest[-1].completion
    assert completion.finish_reason == "length"
    assert len(first.token_ids) + sum(len(d.token_ids) for d in rest) == GREEDY.max_tokens


async def test_an_engine_abort_by_id_stops_the_live_request_of_that_id(make_engine):
    engine = make_engine()
    stream = engine.stream("Hello world", LONG, request_id="stop-me")
    await asyncio.wait_for(stream.__anext__(), GUARD_SECONDS)
    engine.abort("stop-me")
    rest = await _drain(stream)
    assert rest[-1].completion.finish_reason == "abort"
    assert len(rest[-1].completion.token_ids) < LONG.max_tokens


async def test_close_finishes_every_stream_in_flight_with_a_final_delta(make_engine):
    engine = make_engine(max_num_seqs=2)  # a third stream waits: it is finished too
    streams = [engine.stream(p, LONG) for p in ("Hello world", "The quick brown fox", "A KV cache")]
    started = [await asyncio.wait_for(s.__anext__(), GUARD_SECONDS) for s in streams[:2]]
    pending = asyncio.ensure_future(streams[2].__anext__())  # submitted, still waiting for a slot
    await asyncio.sleep(0)
    engine.close()
    finals = [(await _drain(s))[-1].completion for s in streams[:2]]
    last = await asyncio.wait_for(pending, GUARD_SECONDS)
    while last.completion is None:
        last = await asyncio.wait_for(streams[2].__anext__(), GUARD_SECONDS)
    assert len(started) == 2
    assert [c.finish_reason for c in [*finals, last.completion]] == ["abort"] * 3
    stats = engine.stats()
    assert stats.num_running == stats.num_waiting == stats.blocks_used == 0
    with pytest.raises(RuntimeError, match="closed"):
        engine.stream("Hello", GREEDY)
    with pytest.raises(RuntimeError, match="closed"):
        engine.generate(["Hello"], GREEDY)


def test_a_stop_token_ends_the_output_without_its_text(make_engine):
    engine = make_engine()
    [free] = engine.generate(["The quick brown fox"], SamplingParams(max_tokens=30, temperature=0, ignore_eos=True))
    at = next(
        i
        for i, t in enumerate(free.token_ids)
        if i >= 3 and engine.tokenizer.decode([t]).strip() and t not in free.token_ids[:i]
    )
    stop_id = free.token_ids[at]
    [stopped] = engine.generate(
        ["The quick brown fox"], SamplingParams(max_tokens=30, temperature=0, stop_token_ids=(stop_id,))
    )
    assert stopped.finish_reason == "stop"
    assert stopped.token_ids == free.token_ids[: at + 1]  # the token is in token_ids (as vLLM)
    assert stopped.text == engine.tokenizer.decode(free.token_ids[:at])  # its text is not


def test_each_core_step_returns_its_tokens_its_finished_requests_and_the_stats_after_it(make_engine):
    engine = make_engine()
    core, tokenizer = engine.core, engine.tokenizer
    deltas: dict[str, list[StreamDelta]] = {"short": [], "long": [], "dropped": []}
    prompt = tokenizer.encode("Hello world")

    def request(rid: str, max_tokens: int) -> Request:
        params = SamplingParams(max_tokens=max_tokens, temperature=0, ignore_eos=True)
        return Request(Sequence(rid, prompt, params), Detokenizer(tokenizer, prompt, ()), deltas[rid].append)

    short, long, dropped = request("short", 1), request("long", 3), request("dropped", 3)
    for each in (short, long, dropped):
        core.add(each)
    first = core.step()  # every prompt fits in one step's token budget: each samples its first token
    assert set(first.new_token_ids) == {"short", "long", "dropped"}
    assert first.finished == (("short", "length"),)
    assert (first.stats.num_running, first.stats.generation_tokens) == (2, 3)
    core.abort(dropped)  # between steps: reported with the next step's output
    second = core.step()
    assert second.finished == (("dropped", "abort"),) and list(second.new_token_ids) == ["long"]
    third = core.step()
    assert third.finished == (("long", "length"),)
    assert third.stats.num_running == third.stats.num_waiting == third.stats.blocks_used == 0
    assert third.stats.generation_tokens == 5
    sampled = sum((output.new_token_ids["long"] for output in (first, second, third)), ())
    assert deltas["long"][-1].completion.token_ids == sampled
    assert [d.completion.finish_reason for d in (deltas["short"][-1], deltas["dropped"][-1])] == ["length", "abort"]


def test_engine_stats_are_the_snapshot_a_step_publishes_not_a_read_of_the_core(make_engine, monkeypatch):
    engine = make_engine()
    [out] = engine.generate(["Hello world"], GREEDY)
    output = engine.step()
    assert engine.stats() is output.stats
    monkeypatch.setattr(engine.core, "stats", lambda: pytest.fail("stats() read the core"))
    stats = engine.stats()
    assert stats.generation_tokens == len(out.token_ids) == GREEDY.max_tokens
    assert stats.num_running == stats.num_waiting == stats.blocks_used == 0
