"""The engine against transformers `generate()` on the same random checkpoint, in one run.

Checkpoint: Llama, 8 layers, hidden 512, GQA 8/4 heads, vocab 32000 (56M parameters), random
weights, built in a temporary directory. Measures: cold TTFT at 128/512/2048-token prompts; TTFT of
a 32-token suffix after a 2048-token cached prefix vs cold; decode tokens/s at batch 1; total
tokens/s with 16 concurrent requests of 128 prompt + 64 output tokens. Both contenders are loaded
at once and take turns at each measure, `ROUNDS` rounds, medians; the cold 2048+32 prompt is also
timed against the cold 2048 one back to back, as a ratio. `bench_engine_cuda.py` runs
the same measures on a GPU in bf16. A last table gives the per-token cost of constrained decoding's
mask (llguidance, `local_backend.server.constrained`) on the bundled model, whose tokenizer the
grammar needs: the mask's own time per token, and decode time per token with and without it.

Figures mean something only on an otherwise idle machine. On a busy one, OpenMP threads spinning
at the barriers of small parallel ops dominate both contenders, several times over;
`OMP_WAIT_POLICY=PASSIVE` in the environment before the process starts removes most of it.
The figures of the last run are in docs/benchmarks.md.
"""

from __future__ import annotations

import functools
import itertools
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
ROUNDS = 3
TARGETS = {"cached_prefix": 10.0, "decode_b1": 2.0, "concurrent_vs_hf_b1": 4.0, "suffix_over_prefix": 1.05}


def build_checkpoint(directory: Path) -> Path:
    """Save the random benchmark model with a word-level tokenizer covering every id."""
    import transformers
    from tokenizers import Tokenizer, models, pre_tokenizers

    config = transformers.LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=512,
        intermediate_size=1376,
        num_hidden_layers=8,
        num_attention_heads=8,
        num_key_value_heads=4,
        max_position_embeddings=4096,
        bos_token_id=1,
        eos_token_id=2,
    )
    torch.manual_seed(0)
    transformers.LlamaForCausalLM(config).save_pretrained(directory)
    tokenizer = Tokenizer(models.WordLevel({f"w{i}": i for i in range(VOCAB)}, unk_token="w0"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.save(str(directory / "tokenizer.json"))
    (directory / "tokenizer_config.json").write_text(json.dumps({"bos_token": "w1", "eos_token": "w2"}))
    return directory


def once(fn: Callable[[], object]) -> float:
    """Wall seconds of one call of `fn`."""
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def prompts(count: int, length: int, seed: int) -> list[list[int]]:
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(3, VOCAB, (count, length), generator=gen).tolist()


Measures = dict[str, Callable[[], float]]
"""Each measure as a call that runs it once and returns its figure (seconds, or tokens/s)."""


def transformers_measures(directory: Path, device: str, dtype: torch.dtype) -> Measures:
    import transformers

    model = transformers.AutoModelForCausalLM.from_pretrained(directory, dtype=dtype).to(device).eval()
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)

    def generate(batch: list[list[int]], new_tokens: int) -> Callable[[], object]:
        ids = torch.tensor(batch, device=device)

        def run() -> None:
            with torch.inference_mode():
                model.generate(
                    ids, max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False, pad_token_id=0
                )
            sync()

        return run

    measures: Measures = {f"ttft_{n}": functools.partial(once, generate(prompts(1, n, n), 1)) for n in PROMPT_LENGTHS}
    measures["ttft_cold_suffix"] = functools.partial(once, generate(prompts(1, 2048 + SUFFIX, 5), 1))
    one, full = generate(prompts(1, 128, 7), 1), generate(prompts(1, 128, 7), DECODE_TOKENS)
    measures["decode_b1"] = lambda: (DECODE_TOKENS - 1) / (once(full) - once(one))
    batch = generate(prompts(CONCURRENT, CONCURRENT_PROMPT, 9), CONCURRENT_OUTPUT)
    measures["concurrent"] = lambda: CONCURRENT * CONCURRENT_OUTPUT / once(batch)
    return measures


def engine_measures(engine: Engine) -> Measures:
    def generate(batch: list[list[int]], new_tokens: int, cold: bool = True) -> Callable[[], object]:
        params = SamplingParams(max_tokens=new_tokens, temperature=0, ignore_eos=True)

        def run() -> None:
            if cold:
                engine.reset_prefix_cache()
            engine.generate(batch, params)

        return run

    measures: Measures = {f"ttft_{n}": functools.partial(once, generate(prompts(1, n, n), 1)) for n in PROMPT_LENGTHS}
    [prefix] = prompts(1, 2048, 4)
    [suffix] = prompts(1, SUFFIX, 5)
    cold_suffix, cold_prefix = generate([prefix + suffix], 1), generate([prefix], 1)
    measures["ttft_cold_suffix"] = functools.partial(once, cold_suffix)
    order = itertools.cycle(((cold_suffix, cold_prefix), (cold_prefix, cold_suffix)))

    def suffix_over_prefix() -> float:
        """Back to back, the same load; the order alternates, so neither always follows the other contender."""
        first, second = next(order)
        seconds = {first: once(first), second: once(second)}
        return seconds[cold_suffix] / seconds[cold_prefix]

    measures["suffix_over_prefix"] = suffix_over_prefix

    def cached_suffix() -> float:
        engine.reset_prefix_cache()
        engine.generate([prefix + [3] * SUFFIX], SamplingParams(max_tokens=1))  # caches the prefix alone
        return once(generate([prefix + suffix], 1, cold=False))

    measures["ttft_cached_suffix"] = cached_suffix
    one, full = generate(prompts(1, 128, 7), 1), generate(prompts(1, 128, 7), DECODE_TOKENS)
    measures["decode_b1"] = lambda: (DECODE_TOKENS - 1) / (once(full) - once(one))
    batch = generate(prompts(CONCURRENT, CONCURRENT_PROMPT, 9), CONCURRENT_OUTPUT)
    measures["concurrent"] = lambda: CONCURRENT * CONCURRENT_OUTPUT / once(batch)
    return measures


def interleaved(contenders: list[Measures]) -> list[dict[str, float]]:
    """The median of `ROUNDS` rounds per measure, the contenders taking turns at each (after a warm-up
    call), so a change in the machine's load falls on both."""
    samples: list[dict[str, list[float]]] = [{key: [] for key in measures} for measures in contenders]
    for measures in contenders:
        for measure in measures.values():
            measure()
    for _ in range(ROUNDS):
        for key in contenders[-1]:
            for measures, figures in zip(contenders, samples):
                if key in measures:
                    figures[key].append(measures[key]())
    return [{key: statistics.median(values) for key, values in figures.items()} for figures in samples]


MASK_SCHEMA = {
    "type": "object",
    "properties": {
        "city": {"type": "string"},
        "days": {"type": "integer"},
        "tags": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["city", "days", "tags"],
}
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
    return {
        "mask_s": sum(m.seconds for m in masks) / sum(m.calls for m in masks),
        "free_s": free / tokens,
        "constrained_s": constrained / tokens,
        "vocab": float(engine.config.vocab_size),
    }


def report_mask(mask: dict[str, float]) -> None:
    print(f"\nconstrained decoding's mask on the bundled model (vocab {mask['vocab']:.0f}), batch 1, CPU float32")
    print(f"{'measure':<44}{'µs per token':>14}")
    print(f"{'the mask alone (llguidance + masked_fill)':<44}{mask['mask_s'] * 1e6:>14.0f}")
    print(f"{'per generated token, free (prefill included)':<44}{mask['free_s'] * 1e6:>14.0f}")
    print(f"{'per generated token, JSON schema':<44}{mask['constrained_s'] * 1e6:>14.0f}")
    print(
        f"mask share of a constrained token: {mask['mask_s'] / mask['constrained_s']:.0%}; "
        f"constrained ÷ free: {mask['constrained_s'] / mask['free_s']:.2f}x"
    )


def report(hf: dict[str, float], ours: dict[str, float], label: str) -> None:
    """Print the comparison table with ratios and the issue's targets."""
    rows = [
        (
            f"TTFT {n} tokens (ms)",
            hf[f"ttft_{n}"] * 1e3,
            ours[f"ttft_{n}"] * 1e3,
            hf[f"ttft_{n}"] / ours[f"ttft_{n}"],
            "",
        )
        for n in PROMPT_LENGTHS
    ]
    cached = ours["ttft_cold_suffix"] / ours["ttft_cached_suffix"]
    rows.append(
        (
            f"TTFT 2048+{SUFFIX} cold (ms)",
            hf["ttft_cold_suffix"] * 1e3,
            ours["ttft_cold_suffix"] * 1e3,
            hf["ttft_cold_suffix"] / ours["ttft_cold_suffix"],
            "",
        )
    )
    slower = ours["suffix_over_prefix"]
    rows.append(
        (
            f"TTFT 2048+{SUFFIX} ÷ 2048, cold",
            float("nan"),
            slower,
            slower,
            f"<= {TARGETS['suffix_over_prefix']:g}: {'PASS' if slower <= TARGETS['suffix_over_prefix'] else 'FAIL'}",
        )
    )
    rows.append(
        (
            f"TTFT 2048+{SUFFIX} cached (ms)",
            float("nan"),
            ours["ttft_cached_suffix"] * 1e3,
            cached,
            f"cold/cached >= {TARGETS['cached_prefix']:g}x: {'PASS' if cached >= TARGETS['cached_prefix'] else 'FAIL'}",
        )
    )
    decode = ours["decode_b1"] / hf["decode_b1"]
    rows.append(
        (
            "decode batch 1 (tok/s)",
            hf["decode_b1"],
            ours["decode_b1"],
            decode,
            f">= {TARGETS['decode_b1']:g}x: {'PASS' if decode >= TARGETS['decode_b1'] else 'FAIL'}",
        )
    )
    vs_b1 = ours["concurrent"] / hf["decode_b1"]
    rows.append(
        (
            f"{CONCURRENT} x {CONCURRENT_PROMPT}+{CONCURRENT_OUTPUT} (tok/s)",
            hf["concurrent"],
            ours["concurrent"],
            ours["concurrent"] / hf["concurrent"],
            f"vs HF batch-1 {vs_b1:.1f}x >= {TARGETS['concurrent_vs_hf_b1']:g}x: "
            f"{'PASS' if vs_b1 >= TARGETS['concurrent_vs_hf_b1'] else 'FAIL'}",
        )
    )
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"\nkvwise engine vs transformers generate() — {label}; load average at the end {load}")
    print("(ratio: how many times the engine is faster; compare runs on an otherwise idle machine)")
    print(f"{'measure':<30}{'transformers':>14}{'engine':>12}{'ratio':>9}  target")
    for name, theirs, mine, ratio, target in rows:
        print(f"{name:<30}{theirs:>14.1f}{mine:>12.2f}{ratio:>8.2f}x  {target}")


def run(device: str, dtype: torch.dtype, label: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        directory = build_checkpoint(Path(tmp))
        engine = Engine.from_pretrained(directory, device=device, dtype=dtype)
        try:
            hf, ours = interleaved([transformers_measures(directory, device, dtype), engine_measures(engine)])
        finally:
            engine.close()
    report(hf, ours, label)


def main() -> None:
    run("cpu", torch.float32, f"CPU float32, {torch.get_num_threads()} threads")
    report_mask(measure_mask())


if __name__ == "__main__":
    main()
