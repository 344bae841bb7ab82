"""`Linear`: the row-major product and oneDNN's prepacked one agree, and a CPU float32 load packs."""

from __future__ import annotations

import pytest
import torch

from local_backend import Engine
from local_backend._constants import ONEDNN_MIN_ROWS
from local_backend.kernels import ops
from local_backend.model.llama import Linear


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("rows", [1, ONEDNN_MIN_ROWS, 37])
def test_the_packed_product_equals_the_plain_one(bias, rows):
    torch.manual_seed(0)
    linear = Linear(48, 80, bias, torch.float32, ops.TORCH)
    torch.nn.init.normal_(linear.weight_t)
    if bias:
        torch.nn.init.normal_(linear.bias)
    x = torch.randn(rows, 48)
    plain = linear(x)
    linear.pack()
    assert torch.allclose(linear(x), plain, atol=1e-5)
    expected = x @ linear.weight_t + (linear.bias if bias else 0)
    assert torch.allclose(linear(x), expected, atol=1e-5)


def test_a_cpu_float32_load_packs_every_projection():
    engine = Engine.from_pretrained("default", device="cpu", dtype="float32", kv_cache_memory=2**22)
    try:
        linears = [m for m in engine.core.runner.model.modules() if isinstance(m, Linear)]
        assert linears and all(m.packed is not None for m in linears)
    finally:
        engine.close()
