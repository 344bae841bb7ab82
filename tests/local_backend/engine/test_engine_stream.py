"""Streaming, aborts and the background loop: what the HTTP server relies on."""

from __future__ import annotations

import asyncio
import gc
import random
from contextlib import aclosing

from local_backend import Engine, SamplingParams

GREEDY = SamplingParams(max_tokens=20, temperature=0, ignore_eos=True)


async def _collect(engine: Engine, prompt, params: SamplingParams, keep: int | None = None):
    deltas = []
    async with aclosing(engine.stream(prompt, params)) as stream:
        async for delta in stream:
            deltas.append(delta)
            if keep is not None and len(deltas) >= keep:
                break
    return deltas


async def test_stream_deltas_add_up_to_the_generated_completion(make_engine):
    engine = make_engine()
    [expected] = engine.generate(["Hello world"], GREEDY)
    deltas = await _collect(engine, "Hello world", GREEDY)
    completion = deltas[-1].completion
    assert completion is not None and completion.finish_reason == "length"
    assert "".join(d.text for d in deltas) == completion.text == expected.text
    assert tuple(t for d in deltas for t in d.token_ids) == completion.token_ids == expected.token_ids
    assert all(d.completion is None for d in deltas[:-1])


async def test_stream_never_emits_part_of_a_stop_string(make_engine):
    engine = make_engine()
    [free] = engine.generate(["The quick"], SamplingParams(max_tokens=30, temperature=0, ignore_eos=True))
    stop = free.text[10:13]
    deltas = await _collect(engine, "The quick", SamplingParams(max_tokens=30, temperature=0, stop=stop))
    text = "".join(d.text for d in deltas)
    assert text == deltas[-1].completion.text == free.text[: free.text.find(stop)]


async def test_concurrent_streams_each_get_their_own_tokens(make_engine):
    engine = make_engine()
    prompts = ["Hello world", "The quick brown fox", "A KV cache"]
    expected = engine.generate(prompts, GREEDY)
    results = await asyncio.gather(*(_collect(engine, p, GREEDY) for p in prompts))
    for deltas, want in zip(results, expected):
        assert deltas[-1].completion.token_ids == want.token_ids


async def test_abandoned_stream_aborts_its_request_and_frees_its_blocks(make_engine):
    engine = make_engine()
    deltas = await _collect(engine, "Hello world", SamplingParams(max_tokens=200, ignore_eos=True), keep=3)
    assert len(deltas) == 3
    engine.step()  # drain the abort if the loop thread was busy
    stats = engine.stats()
    assert stats.num_running == stats.num_waiting == stats.blocks_used == 0
    assert stats.generation_tokens < 150  # aborted, not run to its 200 tokens


def test_abort_of_a_waiting_or_unknown_request_is_harmless(make_engine):
    engine = make_engine()
    engine.abort("no-such-request")
    [out] = engine.generate(["Hello"], SamplingParams(max_tokens=2))
    assert out.finish_reason in ("stop", "length")


async def test_two_hundred_requests_with_aborts_leave_no_block_leaked(make_engine):
    engine = make_engine(kv_cache_memory=40 * 16 * 512, max_num_seqs=16)
    rng = random.Random(7)
    prefixes = [[rng.randrange(4, 300) for _ in range(rng.randrange(16, 60))] for _ in range(5)]

    async def one(i: int):
        prompt = rng.choice(prefixes)[: rng.randrange(8, 60)] + [
            rng.randrange(4, 300) for _ in range(rng.randrange(1, 20))
        ]
        params = SamplingParams(max_tokens=rng.randrange(1, 24), seed=i, ignore_eos=i % 2 == 0)
        return await _collect(engine, prompt, params, keep=rng.randrange(1, 6) if i % 5 == 0 else None)

    results = await asyncio.gather(*(one(i) for i in range(200)))
    assert len(results) == 200
    engine.step()
    stats = engine.stats()
    assert stats.blocks_used == 0
    assert stats.blocks_free + stats.blocks_cached == stats.num_blocks
    assert stats.num_running == stats.num_waiting == 0
    assert stats.prefix_cache_hit_tokens > 0
    assert stats.kv_cache_bytes == stats.num_blocks * stats.block_size * engine.kv_bytes_per_token
    cache = engine.runner.kv_cache
    assert cache.numel() * cache.element_size() == stats.kv_cache_bytes
    assert all(b.ref_count == 0 for b in engine.block_manager.blocks)


async def test_a_stream_dropped_without_closing_is_aborted_when_collected(make_engine):
    engine = make_engine()
    stream = engine.stream("Hello world", SamplingParams(max_tokens=200, ignore_eos=True))
    await stream.__anext__()
    del stream
    gc.collect()
    for _ in range(100):  # the loop's async-generator finaliser runs the stream's `finally`
        await asyncio.sleep(0.01)
        engine.step()
        if engine.stats().num_running == 0:
            break
    stats = engine.stats()
    assert stats.num_running == stats.num_waiting == stats.blocks_used == 0
    assert stats.generation_tokens < 150  # aborted, not run to its 200 tokens


async def test_every_delta_knows_the_prompts_final_cache_split(make_engine):
    engine = make_engine()
    prompt = list(range(4, 44))  # two full 16-token blocks and a partial one
    engine.generate([prompt], SamplingParams(max_tokens=1))
    deltas = await _collect(engine, prompt + [50, 51], GREEDY)
    completion = deltas[-1].completion
    assert (completion.cached_tokens, completion.cache_written_tokens) == (32, 0)
    assert {(d.cached_tokens, d.cache_written_tokens) for d in deltas} == {(32, 0)}
