"""The engine against transformers `generate()` on the same random checkpoint, in one run.

Checkpoint: Llama, 8 layers, hidden 512, GQA 8/4 heads, vocab 32000 (56M parameters), random
weights, built in a temporary directory. Measures: cold TTFT at 128/512/2048-token prompts; TTFT of
a 32-token suffix after a 2048-token cached prefix vs cold; decode tokens/s at batch 1; total
tokens/s with 16 concurrent requests of 128 prompt + 64 output tokens. `bench_engine_cuda.py` runs
the same measures on a GPU in bf16. A last table gives the per-token cost of constrained decoding's
mask (llguidance, `local_backend.server.constrained`) on the bundled model, whose tokenizer the
grammar needs: the mask's own time per token, and decode time per token with and without it.

Figures mean something only on an otherwise idle machine. On a busy one, OpenMP threads spinning
at the barriers of small parallel ops dominate both contenders (seen at load 4 on 2 cores: engine
decode 137 ms/step, transformers 308); `OMP_WAIT_POLICY=PASSIVE` in the environment before the
process starts removes most of it (14 and 22 ms/step).
"""

from __future__ import annotations

import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

from local_backend import Engine, SamplingParams

VOCAB = 32_000
PROMPT_LENGTHS = (128, 512, 2048)
SUFFIX = 32
DECODE_TOKENS = 128
CONCURRENT, CONCURRENT_PROMPT, CONCURRENT_OUTPUT = 16, 128, 64
TARGETS = {"cached_prefix": 10.0, "decode_b1": 1.5, "concurrent_vs_hf_b1": 4.0}


def build_checkpoint(directory: Path) -> Path:
    """Save the random benchmark model with a word-level tokenizer covering every id."""
    import transformers
    from tokenizers import Tokenizer, models, pre_tokenizers

    config = transformers.LlamaConfig(
        vocab_size=VOCAB, hidden_size=512, intermediate_size=1376, num_hidden_layers=8,
        num_attention_heads=8, num_key_value_heads=4, max_position_embeddings=4096,
        bos_token_id=1, eos_token_id=2,
    )  # fmt: skip
    torch.manual_seed(0)
    transformers.LlamaForCausalLM(config).save_pretrained(directory)
    tokenizer = Tokenizer(models.WordLevel({f"w{i}": i for i in range(VOCAB)}, unk_token="w0"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.save(str(directory / "tokenizer.json"))
    (directory / "tokenizer_config.json").write_text(json.dumps({"bos_token": "w1", "eos_token": "w2"}))
    return directory


def timed(fn: Callable[[], object], repeats: int) -> float:
    """Median wall seconds of `fn` after one warm-up call."""
    fn()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def prompts(count: int, length: int, seed: int) -> list[list[int]]:
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(3, VOCAB, (count, length), generator=gen).tolist()


def measure_transformers(directory: Path, device: str, dtype: torch.dtype) -> dict[str, float]:
    import transformers

    model = transformers.AutoModelForCausalLM.from_pretrained(directory, dtype=dtype).to(device).eval()
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)

    def generate(batch: list[list[int]], new_tokens: int) -> Callable[[], object]:
        ids = torch.tensor(batch, device=device)

        def run() -> None:
            with torch.inference_mode():
                model.generate(ids, max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                               do_sample=False, pad_token_id=0)  # fmt: skip
            sync()

        return run

    out = {f"ttft_{n}": timed(generate(prompts(1, n, n), 1), 3) for n in PROMPT_LENGTHS}
    out["ttft_cold_suffix"] = timed(generate(prompts(1, 2048 + SUFFIX, 5), 1), 2)
    one = timed(generate(prompts(1, 128, 7), 1), 3)
    full = timed(generate(prompts(1, 128, 7), DECODE_TOKENS), 1)
    out["decode_b1"] = (DECODE_TOKENS - 1) / (full - one)
    batch = prompts(CONCURRENT, CONCURRENT_PROMPT, 9)
    elapsed = timed(generate(batch, CONCURRENT_OUTPUT), 1)
    out["concurrent"] = CONCURRENT * CONCURRENT_OUTPUT / elapsed
    return out


def measure_engine(directory: Path, device: str, dtype: torch.dtype) -> dict[str, float]:
    engine = Engine.from_pretrained(directory, device=device, dtype=dtype)

    def generate(batch: list[list[int]], new_tokens: int, cold: bool = True) -> Callable[[], object]:
        params = SamplingParams(max_tokens=new_tokens, temperature=0, ignore_eos=True)

        def run() -> None:
            if cold:
                engine.reset_prefix_cache()
            engine.generate(batch, params)

        return run

    out = {f"ttft_{n}": timed(generate(prompts(1, n, n), 1), 3) for n in PROMPT_LENGTHS}
    [prefix] = prompts(1, 2048, 4)
    [suffix] = prompts(1, SUFFIX, 5)
    out["ttft_cold_suffix"] = timed(generate([prefix + suffix], 1), 2)
    engine.generate([prefix + [3] * SUFFIX], SamplingParams(max_tokens=1))
    out["ttft_cached_suffix"] = timed(generate([prefix + suffix], 1, cold=False), 3)
    one = timed(generate(prompts(1, 128, 7), 1), 3)
    full = timed(generate(prompts(1, 128, 7), DECODE_TOKENS), 1)
    out["decode_b1"] = (DECODE_TOKENS - 1) / (full - one)
    batch = prompts(CONCURRENT, CONCURRENT_PROMPT, 9)
    out["concurrent"] = CONCURRENT * CONCURRENT_OUTPUT / timed(generate(batch, CONCURRENT_OUTPUT), 1)
    engine.close()
    return out


MASK_SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"},
               "tags": {"type": "array", "items": {"type": "string"}}}, "required": ["city", "days", "tags"]}
MASK_TOKENS, MASK_REQUESTS = 48, 8


class _TimedMask:
    """A request's grammar processor, timed call by call."""

    def __init__(self, inner: Callable[..., torch.Tensor]) -> None:
        self.inner, self.seconds, self.calls = inner, 0.0, 0

    def __call__(self, output_token_ids: list[int], logits: torch.Tensor) -> torch.Tensor:
        start = time.perf_counter()
        result = self.inner(output_token_ids, logits)
        self.seconds, self.calls = self.seconds + time.perf_counter() - start, self.calls + 1
        return result


def measure_mask() -> dict[str, float]:
    """Per-token seconds of the JSON-schema mask alone, and of a decode step with and without it (batch 1)."""
    from local_backend.server.constrained import Grammars

    engine = Engine.from_pretrained("default", device="cpu")
    grammars = Grammars(engine.tokenizer, engine.config.vocab_size, sorted(engine.core.eos))
    prompt = engine.tokenizer.encode("Plan a trip as JSON: city, days and tags.")
    masks: list[_TimedMask] = []
    free = constrained = tokens = 0.0
    for _ in range(MASK_REQUESTS):
        mask = _TimedMask(grammars.json(MASK_SCHEMA, "response_format"))
        masks.append(mask)
        start = time.perf_counter()
        [done] = engine.generate([prompt], SamplingParams(max_tokens=MASK_TOKENS, temperature=0, logits_processor=mask))
        constrained += time.perf_counter() - start
        produced = len(done.token_ids)
        start = time.perf_counter()
        engine.generate([prompt], SamplingParams(max_tokens=produced, temperature=0, ignore_eos=True))
        free += time.perf_counter() - start
        tokens += produced
    engine.close()
    return {"mask_s": sum(m.seconds for m in masks) / sum(m.calls for m in masks), "free_s": free / tokens,
            "constrained_s": constrained / tokens, "vocab": float(engine.config.vocab_size)}


def report_mask(mask: dict[str, float]) -> None:
    print(f"\nconstrained decoding's mask on the bundled model (vocab {mask['vocab']:.0f}), batch 1, CPU float32")
    print(f"{'measure':<44}{'µs per token':>14}")
    print(f"{'the mask alone (llguidance + masked_fill)':<44}{mask['mask_s'] * 1e6:>14.0f}")
    print(f"{'per generated token, free (prefill included)':<44}{mask['free_s'] * 1e6:>14.0f}")
    print(f"{'per generated token, JSON schema':<44}{mask['constrained_s'] * 1e6:>14.0f}")
    print(f"mask share of a constrained token: {mask['mask_s'] / mask['constrained_s']:.0%}; "
          f"constrained ÷ free: {mask['constrained_s'] / mask['free_s']:.2f}x")


def report(hf: dict[str, float], ours: dict[str, float], label: str) -> None:
    """Print the comparison table with ratios and the issue's targets."""
    rows = [(f"TTFT {n} tokens (ms)", hf[f"ttft_{n}"] * 1e3, ours[f"ttft_{n}"] * 1e3, hf[f"ttft_{n}"] / ours[f"ttft_{n}"], "")
            for n in PROMPT_LENGTHS]  # fmt: skip
    cached = ours["ttft_cold_suffix"] / ours["ttft_cached_suffix"]
    rows.append((f"TTFT 2048+{SUFFIX} cold (ms)", hf["ttft_cold_suffix"] * 1e3, ours["ttft_cold_suffix"] * 1e3,
                 hf["ttft_cold_suffix"] / ours["ttft_cold_suffix"], ""))  # fmt: skip
    rows.append((f"TTFT 2048+{SUFFIX} cached (ms)", float("nan"), ours["ttft_cached_suffix"] * 1e3, cached,
                 f"cold/cached >= {TARGETS['cached_prefix']:g}x: {'PASS' if cached >= TARGETS['cached_prefix'] else 'FAIL'}"))  # fmt: skip
    decode = ours["decode_b1"] / hf["decode_b1"]
    rows.append(("decode batch 1 (tok/s)", hf["decode_b1"], ours["decode_b1"], decode,
                 f">= {TARGETS['decode_b1']:g}x: {'PASS' if decode >= TARGETS['decode_b1'] else 'FAIL'}"))  # fmt: skip
    vs_b1 = ours["concurrent"] / hf["decode_b1"]
    rows.append((f"{CONCURRENT} x {CONCURRENT_PROMPT}+{CONCURRENT_OUTPUT} (tok/s)", hf["concurrent"], ours["concurrent"],
                 ours["concurrent"] / hf["concurrent"],
                 f"vs HF batch-1 {vs_b1:.1f}x >= {TARGETS['concurrent_vs_hf_b1']:g}x: "
                 f"{'PASS' if vs_b1 >= TARGETS['concurrent_vs_hf_b1'] else 'FAIL'}"))  # fmt: skip
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"\nkvwise engine vs transformers generate() — {label}; load average at the end {load}")
    print("(ratio: how many times the engine is faster; compare runs on an otherwise idle machine)")
    print(f"{'measure':<30}{'transformers':>14}{'engine':>12}{'ratio':>9}  target")
    for name, theirs, mine, ratio, target in rows:
        print(f"{name:<30}{theirs:>14.1f}{mine:>12.1f}{ratio:>8.1f}x  {target}")


def run(device: str, dtype: torch.dtype, label: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        directory = build_checkpoint(Path(tmp))
        hf = measure_transformers(directory, device, dtype)
        ours = measure_engine(directory, device, dtype)
    report(hf, ours, label)


def main() -> None:
    run("cpu", torch.float32, f"CPU float32, {torch.get_num_threads()} threads")
    report_mask(measure_mask())


if __name__ == "__main__":
    main()
