"""SmolLM2's Q4_1 file served from its blocks (`--quantization auto`) against its dequantized weights (`none`).

In the slow tier.

Both engines compute in float32; `none` multiplies by the float32 weights the `gguf` package's dequantization gives
(today's path, whose tokens test_gguf_parity.py holds equal to transformers'), `auto` by the blocks themselves
(`csrc/quant_linear.cpp`; where the CPU has AVX2, decode rows multiplied in integers by x rounded to 16 bits a
block). The products differ in the order of their sums and by that rounding, so every logit of every step,
until the two answers part, lies within `LOGIT_TOLERANCE` of the reference's; a near tie may still flip a greedy
token, so at least 3 of the 4 answers must be equal token for token (the issue's bar for 4-bit types).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
import torch

from local_backend import Engine, SamplingParams

MODEL = "smollm2-135m-instruct"
NEW_TOKENS = 64
PROMPTS = [
    "What is the capital of France?",
    "Write a haiku about the sea.",
    "Why is the sky blue?",
    "Give me three tips for learning Python.",
]
LOGIT_TOLERANCE = 2e-3
"""Most |logit(auto) − logit(none)| at any step, relative to the step's largest |logit| (about 20 here)."""


class Recorder:
    """A logits processor keeping each step's raw logits (float32, copied)."""

    def __init__(self) -> None:
        self.steps: list[torch.Tensor] = []

    def __call__(self, output_token_ids: Sequence[int], logits: torch.Tensor) -> torch.Tensor:
        self.steps.append(logits.detach().float().clone())
        return logits


def _answers(quantization: str) -> tuple[list[list[int]], list[list[torch.Tensor]], Any]:
    engine = Engine.from_pretrained(MODEL, device="cpu", dtype="float32", max_model_len=512, quantization=quantization)
    try:
        types = engine.stats().quantized_types
        recorders = [Recorder() for _ in PROMPTS]
        prompts = [engine.tokenizer.chat_prompt([{"role": "user", "content": text}]) for text in PROMPTS]
        outputs = [
            engine.generate(
                [prompt],
                SamplingParams(max_tokens=NEW_TOKENS, temperature=0, ignore_eos=True, logits_processor=recorder),
            )[0]
            for prompt, recorder in zip(prompts, recorders)
        ]
    finally:
        engine.close()
    return [list(out.token_ids) for out in outputs], [recorder.steps for recorder in recorders], types


@pytest.fixture(scope="module")
def reference() -> tuple[list[list[int]], list[list[torch.Tensor]], Any]:
    return _answers("none")


def test_the_q4_1_file_served_from_its_blocks_gives_the_dequantized_model_s_tokens_and_logits(reference) -> None:
    tokens, logits, types = _answers("auto")
    expected_tokens, expected_logits, reference_types = reference
    assert (types, reference_types) == ("Q4_1,Q8_0", "")
    assert sum(ours == theirs for ours, theirs in zip(tokens, expected_tokens)) >= 3
    worst = 0.0
    for ours, theirs, our_steps, their_steps in zip(tokens, expected_tokens, logits, expected_logits):
        agreed = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b), NEW_TOKENS)
        assert len(our_steps) == len(their_steps) == NEW_TOKENS
        for step in range(min(agreed + 1, NEW_TOKENS)):  # the step where they part still read the same context
            gap = (our_steps[step] - their_steps[step]).abs().max().item()
            worst = max(worst, gap / their_steps[step].abs().max().item())
    assert 0 < worst <= LOGIT_TOLERANCE, worst  # 0 would mean the blocks were not what multiplied


def test_a_prompt_longer_than_a_prefill_chunk_is_answered_from_the_blocks_as_from_the_floats() -> None:
    """Every chunk but a prompt's last keeps no row for the logits: the blocks' product must take 0 rows."""
    prompt = " ".join(["river stone light garden window paper market winter"] * 40)
    answers = []
    for quantization in ("auto", "none"):
        engine = Engine.from_pretrained(
            MODEL,
            device="cpu",
            dtype="float32",
            max_model_len=512,
            max_num_batched_tokens=64,
            quantization=quantization,
        )
        try:
            ids = engine.tokenizer.encode(prompt)
            assert len(ids) > 3 * 64
            [out] = engine.generate([ids], SamplingParams(max_tokens=8, temperature=0, ignore_eos=True))
        finally:
            engine.close()
        answers.append(list(out.token_ids))
    assert len(answers[0]) == 8
    assert answers[0][:4] == answers[1][:4]
