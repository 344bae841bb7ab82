"""A step of decodes alone runs every decoder layer in one native call (`kvwise::decode_layers`): the same kernels in
the same order as the model's layer loop, so every step's logits are the loop's bit for bit, for float and kept
(GGUF block) weights, float32 and bfloat16, a float or int8 KV cache, with qkv biases; steps the call does not serve
(prefills, q/k norms, more rows than a kernel takes) run the loop."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import pytest
import torch

from local_backend import Engine, SamplingParams
from local_backend.kernels import cpu_kernels, ops
from tests.local_backend.kernels.op_forms import run_on

NEW_TOKENS = 12


@pytest.fixture(autouse=True)
def _kernels():
    assert cpu_kernels.load()


class Recorder:
    """A logits processor keeping each step's raw logits (copied)."""

    def __init__(self) -> None:
        self.steps: list[torch.Tensor] = []

    def __call__(self, output_token_ids: Sequence[int], logits: torch.Tensor) -> torch.Tensor:
        self.steps.append(logits.detach().clone())
        return logits


def _watch(engine: Engine, fused: bool) -> list[bool]:
    """Route the engine's decode steps through the fused call (or, `fused=False`, the loop alone); the returned
    list gets one entry per call: whether the fused call served the step."""
    native = engine.runner.model.ops
    served: list[bool] = []
    form = type(native).decode_layers if fused else ops.TorchOps.decode_layers

    def decode_layers(*args: object) -> object:
        result = form(native, *args)
        served.append(result is not None)
        return result

    native.decode_layers = decode_layers  # type: ignore[method-assign]
    return served


def _run(engine: Engine, prompts: list[list[int]], fused: bool) -> tuple[list[list[torch.Tensor]], list[bool]]:
    engine.reset_prefix_cache()
    served = _watch(engine, fused)
    recorders = [Recorder() for _ in prompts]
    params = [
        SamplingParams(max_tokens=NEW_TOKENS, temperature=0, ignore_eos=True, logits_processor=r) for r in recorders
    ]
    engine.generate(prompts, params)
    return [r.steps for r in recorders], served


def _assert_same_bits(engine: Engine, prompts: list[list[int]]) -> None:
    fused, served = _run(engine, prompts, fused=True)
    looped, _ = _run(engine, prompts, fused=False)
    assert len(served) >= NEW_TOKENS - 1 and all(served)  # each step after the prompts' is decodes alone, served
    for ours, theirs in zip(fused, looped, strict=True):
        assert len(ours) == len(theirs) == NEW_TOKENS
        assert all(torch.equal(a, b) for a, b in zip(ours, theirs))


@pytest.mark.parametrize("kv_cache_dtype", ["auto", "int8"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("kind", ["llama", "qwen2"])  # qwen2: qkv biases
def test_a_decode_step_in_one_call_gives_the_layer_loop_s_logits_bit_for_bit(make_engine, kind, dtype, kv_cache_dtype):
    engine = make_engine(kind, dtype=dtype, kv_cache_dtype=kv_cache_dtype)
    _take_two_rows_in_matvec(engine)
    two_rows = [[5 + i for i in range(n)] for n in (3, 40)]
    _assert_same_bits(engine, two_rows)


def _take_two_rows_in_matvec(engine: Engine) -> None:
    """Pin the matvec crossover at two rows or more: a machine may measure that oneDNN takes two bfloat16 rows
    sooner (on AMX it does), and then no decode step would reach the fused call this test is about."""
    model = engine.runner.model
    loaded = cpu_kernels.load().choices
    pinned = replace(
        loaded,
        matvec_max_rows=max(2, loaded.matvec_max_rows),
        bf16_matvec_max_rows=max(2, loaded.bf16_matvec_max_rows),
    )
    dtype = model.layer_stack.norms[0].dtype
    run_on(engine, ops.NativeOps(model.layer_stack.head_dim, pinned, dtype))


def test_a_model_with_q_k_norms_decodes_through_the_layer_loop(make_engine):
    engine = make_engine("qwen3")
    assert engine.runner.model.layer_stack is None
    _, served = _run(engine, [[5, 6, 7]], fused=True)
    assert served == []  # never asked: the loop runs every step


def test_more_decode_rows_than_a_projection_kernel_takes_run_the_layer_loop(make_engine):
    engine = make_engine("llama")
    model = engine.runner.model
    stack = model.layer_stack
    assert stack is not None
    most = model.ops.matvec_max_rows
    hidden = stack.norms[0].shape[0]
    kv = engine.runner.kv_cache
    rows = most + 1
    zeros = torch.zeros(rows, dtype=torch.long)
    step = (zeros, zeros[:, None], torch.ones(rows, dtype=torch.long), engine.runner.block_size)
    cos = sin = torch.ones(rows, 1, stack.head_dim)
    assert model.ops.decode_layers(torch.zeros(rows, hidden), stack, cos, sin, kv, step) is None


def test_the_q4_1_file_s_blocks_decode_in_one_call_as_in_the_layer_loop():
    engine = Engine.from_pretrained("smollm2-135m-instruct", device="cpu", dtype="float32", max_model_len=256)
    try:
        assert set(engine.runner.model.layer_stack.kinds) >= {3}  # Q4_1 blocks, multiplied as they are
        prompts = [engine.tokenizer.chat_prompt([{"role": "user", "content": text}]) for text in ("Hi!", "Why?")]
        _assert_same_bits(engine, prompts)
    finally:
        engine.close()
