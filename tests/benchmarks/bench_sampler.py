"""The sampler alone: milliseconds per step at batch 1/16/64 and vocabulary 32k/152k.

Rows are requests 512 prompt tokens in, 128 output tokens along (so penalties have real contexts);
the logits are random. Measures: temperature sampling, top-p (0.9) sampling and vLLM's three
penalties with sampling: the median of several steps after a warm-up step, and in brackets the
best step (the figure least moved by other load on a shared machine). Target (issue 18): batch 64,
vocabulary 32k, under 5 ms per step for each.
"""

from __future__ import annotations

import random
import statistics
import time

import torch

from local_backend.engine.sequence import Sequence
from local_backend.sampling.sampler import Sampler
from local_backend.sampling.sampling_params import SamplingParams

BATCHES = (1, 16, 64)
VOCABS = (32_000, 151_936)
PROMPT, OUTPUT = 512, 128
STEPS = 11
TARGET_MS = 5.0
CASES = {
    "temperature": SamplingParams(temperature=0.8),
    "top_p": SamplingParams(temperature=0.8, top_p=0.9),
    "penalties": SamplingParams(temperature=0.8, repetition_penalty=1.1, frequency_penalty=0.3, presence_penalty=0.3),
}


def _seqs(batch: int, vocab: int, params: SamplingParams) -> list[Sequence]:
    rng = random.Random(batch)
    seqs = []
    for i in range(batch):
        seq = Sequence(f"r{i}", [rng.randrange(vocab) for _ in range(PROMPT)], params)
        seq.token_ids.extend(rng.randrange(vocab) for _ in range(OUTPUT))
        seqs.append(seq)
    return seqs


def step_ms(batch: int, vocab: int, params: SamplingParams) -> tuple[float, float]:
    """Median and best milliseconds of one sampler call; each step appends the drawn tokens as the engine does."""
    sampler = Sampler(vocab, lambda _: frozenset())
    seqs = _seqs(batch, vocab, params)
    torch.manual_seed(0)
    logits = torch.randn(batch, vocab) * 3
    samples = []
    for step in range(STEPS + 1):
        fresh = logits.clone()  # the sampler uses its logits up, as the model's are each step
        start = time.perf_counter()
        tokens = sampler(fresh, seqs)
        elapsed = time.perf_counter() - start
        for seq, token in zip(seqs, tokens):
            seq.token_ids.append(token)
        if step:
            samples.append(elapsed * 1000)
    return statistics.median(samples), min(samples)


def main() -> None:
    print(f"sampler ms/step, median (best) of {STEPS}; prompt {PROMPT} + output {OUTPUT} tokens per row")
    print(f"{'case':<12} {'vocab':>7} " + " ".join(f"{'b' + str(b):>16}" for b in BATCHES))
    for name, params in CASES.items():
        for vocab in VOCABS:
            figures = [step_ms(b, vocab, params) for b in BATCHES]
            cells = " ".join(f"{f'{median:.2f} ({best:.2f})':>16}" for median, best in figures)
            print(f"{name:<12} {vocab:>7} {cells}", flush=True)
            if vocab == VOCABS[0]:
                met = "met" if figures[-1][0] < TARGET_MS else "NOT met"
                print(f"  target b{BATCHES[-1]} vocab {vocab}, median < {TARGET_MS} ms: {met}")


if __name__ == "__main__":
    main()
