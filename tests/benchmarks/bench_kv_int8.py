"""The int8 KV cache (`--kv-cache-dtype int8`) against float32 KV, on `bench_engine`'s random 56M Llama.

- 16-stream decode: 16 prompts of each of `PROMPTS` tokens decode `OUTPUT` tokens each, together; decode
  tokens/s = 16 × (OUTPUT − 1) ÷ (the run's seconds − a 1-token run's), so prefill is left out.
  The two engines take turns, `ROUNDS` rounds, medians. Target: int8 at least 0.9x float32.
- The largest batch of `CONTEXT`-token contexts a `POOL_BYTES` pool holds: the pool's blocks ÷ the
  blocks one context takes, with kv_bytes_per_token = 2 × layers × kv_heads × (head_dim ×
  bytes_per_elem + the int8 rows' scale bytes).
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

import torch

from local_backend import Engine, SamplingParams
from tests.benchmarks.bench_engine import build_checkpoint, prompts
from tests.benchmarks.figures_doc import machine_line

STREAMS, PROMPTS, OUTPUT = 16, (128, 1024), 64
ROUNDS = 3
CONTEXT = 2048
POOL_BYTES = 512 * 2**20
DECODE_TARGET = 0.9
KV_DTYPES = ("auto", "int8")


def seconds(engine: Engine, batch: list[list[int]], tokens: int) -> float:
    """Wall seconds of one cold run of `batch` to `tokens` output tokens each."""
    engine.reset_prefix_cache()
    start = time.perf_counter()
    engine.generate(batch, SamplingParams(max_tokens=tokens, temperature=0, ignore_eos=True))
    return time.perf_counter() - start


def decode_rates(engines: dict[str, Engine], prompt: int) -> dict[str, float]:
    """Median 16-stream decode tokens/s of each engine after `prompt`-token prompts, the engines taking turns."""
    batch = prompts(STREAMS, prompt, 9)
    for engine in engines.values():
        seconds(engine, batch, 2)  # warm-up
    rates: dict[str, list[float]] = {name: [] for name in engines}
    for _ in range(ROUNDS):
        for name, engine in engines.items():
            decode = seconds(engine, batch, OUTPUT) - seconds(engine, batch, 1)
            rates[name].append(STREAMS * (OUTPUT - 1) / decode)
    return {name: statistics.median(values) for name, values in rates.items()}


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        directory = build_checkpoint(Path(tmp) / "random")
        engines = {
            dtype: Engine.from_pretrained(
                directory,
                device="cpu",
                kv_cache_dtype=dtype,
                max_model_len=CONTEXT,
                kv_cache_memory=POOL_BYTES,
                max_num_seqs=256,
            )
            for dtype in KV_DTYPES
        }
        try:
            rates = {prompt: decode_rates(engines, prompt) for prompt in PROMPTS}
            pools = {name: engine.block_manager for name, engine in engines.items()}
            per_token = {name: engine.kv_bytes_per_token for name, engine in engines.items()}
        finally:
            for engine in engines.values():
                engine.close()
    print(f"int8 KV cache against float32 KV, CPU float32 weights, {torch.get_num_threads()} threads; 56M random Llama")
    print(f"machine: {machine_line()}")
    decode_columns = "".join(f"{f'decode @{prompt} tok/s':>20}" for prompt in PROMPTS)
    print(f"{'kv cache':<10}{'bytes/token':>13}{'pool tokens':>13}{f'{CONTEXT}-token contexts':>22}{decode_columns}")
    for name in KV_DTYPES:
        pool = pools[name]
        contexts = pool.num_blocks // -(-CONTEXT // pool.block_size)
        label = "float32" if name == "auto" else name
        decodes = "".join(f"{rates[prompt][name]:>20.1f}" for prompt in PROMPTS)
        print(f"{label:<10}{per_token[name]:>13}{pool.num_blocks * pool.block_size:>13}{contexts:>22}{decodes}")
    capacity = pools["int8"].num_blocks / pools["auto"].num_blocks
    print(f"int8 / float32: a pool of {POOL_BYTES // 2**20} MiB holds {capacity:.2f}x the tokens")
    for prompt in PROMPTS:
        ratio = rates[prompt]["int8"] / rates[prompt]["auto"]
        verdict = "PASS" if ratio >= DECODE_TARGET else "FAIL"
        print(
            f"int8 / float32: {STREAMS}-stream decode after {prompt}-token prompts {ratio:.2f}x "
            f"(target >= {DECODE_TARGET}x: {verdict})"
        )


if __name__ == "__main__":
    main()
