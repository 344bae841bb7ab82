"""The engine on a GPU: the same greedy tokens as transformers on the same GPU, streams that end.

Collected only by `make test-cuda` (`KVWISE_CUDA=1`, see conftest.py): never by `make test` or CI,
which have no GPU. Run on a machine without CUDA it fails at once, saying so.
"""

from __future__ import annotations

import asyncio
import random
from contextlib import aclosing

import pytest
import torch

from local_backend import Engine, SamplingParams

GREEDY = SamplingParams(max_tokens=24, temperature=0, ignore_eos=True)


@pytest.fixture(scope="module")
def cuda() -> torch.device:
    assert torch.cuda.is_available(), "make test-cuda needs a CUDA device; this machine has none"
    return torch.device("cuda")


def _prompts(vocab: int, lengths: list[int], seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(4, vocab) for _ in range(n)] for n in lengths]


@pytest.mark.parametrize("kind", ["llama", "qwen2", "qwen3"])
def test_float32_greedy_batch_on_cuda_matches_transformers_on_cuda(checkpoints, cuda, kind):
    import transformers

    reference = transformers.AutoModelForCausalLM.from_pretrained(checkpoints[kind]).to(cuda).eval()
    with Engine.from_pretrained(checkpoints[kind], device="cuda", dtype="float32", max_model_len=256) as engine:
        prompts = _prompts(engine.config.vocab_size, [5, 17, 33, 48, 70], seed=1)
        outputs = engine.generate(prompts, GREEDY)
        [again] = engine.generate([prompts[-1]], GREEDY)  # served from the prefix cache
    for prompt, out in zip(prompts, outputs):
        want = reference.generate(
            torch.tensor([prompt], device=cuda),
            max_new_tokens=GREEDY.max_tokens,
            min_new_tokens=GREEDY.max_tokens,
            do_sample=False,
            eos_token_id=None,
            pad_token_id=0,
        )[0, len(prompt) :].tolist()
        assert list(out.token_ids) == want
    assert again.cached_tokens == 64 and again.token_ids == outputs[-1].token_ids


async def test_bfloat16_streams_on_cuda_sample_every_path_and_close_ends_them(checkpoints, cuda):
    engine = Engine.from_pretrained(checkpoints["llama"], device="cuda", max_model_len=256)
    assert engine.runner.kv_cache.dtype == torch.bfloat16
    sampled = SamplingParams(
        max_tokens=200,
        temperature=0.8,
        top_p=0.9,
        top_k=40,
        min_p=0.02,
        seed=3,
        repetition_penalty=1.1,
        frequency_penalty=0.2,
        presence_penalty=0.2,
        dry_multiplier=0.5,
        ignore_eos=True,
    )

    async def run(prompt: str):
        async with aclosing(engine.stream(prompt, sampled)) as stream:
            return [delta async for delta in stream]

    tasks = [asyncio.ensure_future(run(p)) for p in ("Hello world", "The quick brown fox", "A KV cache")]

    async def generated(count: int) -> None:
        while engine.stats().generation_tokens < count:
            await asyncio.sleep(0.01)

    await asyncio.wait_for(generated(30), 120)
    engine.close()
    results = await asyncio.wait_for(asyncio.gather(*tasks), 120)
    assert all(deltas[-1].completion.finish_reason in ("abort", "length") for deltas in results)
    assert engine.stats().blocks_used == 0
