"""The decode kernels' own fork-join (`csrc/parallel.h`): chunks claimed from one counter by the caller and a pool.

Its answers may not depend on the thread count beyond the sums' order, nor on which thread ran a chunk, nor on a
second thread starting a region while one runs (that one runs alone). How it copes with a worker the OS parks is
a timing property: `bench_real_model`'s busy rows measure it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch

from local_backend.kernels.quantized import QuantizedWeight, QuantType
from tests.local_backend.kernels.test_quantized import assert_decode, native, random_blocks

THREAD_COUNTS = [1, 2, 3]
KIND = QuantType.Q4_1
OUT = 1000  # outputs split into chunks of at least 16: uneven ones, and more chunks than threads


@pytest.fixture
def thread_count() -> Iterator[None]:
    """Restores torch's thread count, which the tests change."""
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def _weight(seed: int) -> tuple[QuantizedWeight, np.ndarray]:
    blocks = random_blocks(KIND, OUT, 4 * KIND.block_weights, seed=seed)
    return QuantizedWeight(KIND, torch.from_numpy(blocks)), blocks


@pytest.mark.parametrize("rows", [1, 5])
def test_every_thread_count_gives_the_quantized_decode_the_same_answer(rows: int, thread_count: None) -> None:
    native()
    weight, blocks = _weight(seed=3)
    x = torch.randn(rows, weight.in_features, generator=torch.Generator().manual_seed(4))
    answers = []
    for threads in THREAD_COUNTS:
        torch.set_num_threads(threads)
        answers.append(torch.ops.kvwise.quant_matvec(x, weight.blocks, int(KIND), None))
    assert_decode(answers[0], KIND, blocks, x, None, torch.float32)
    # each output is one chunk's, summed by one thread: the split moves no sum
    assert all(torch.equal(answer, answers[0]) for answer in answers[1:])


def test_the_float_decode_is_right_at_every_thread_count(thread_count: None) -> None:
    native()
    gen = torch.Generator().manual_seed(5)
    x, weight_t = torch.randn(3, 640, generator=gen), torch.randn(640, 96, generator=gen)
    for threads in THREAD_COUNTS:
        torch.set_num_threads(threads)
        torch.testing.assert_close(torch.ops.kvwise.matvec(x, weight_t, None), x @ weight_t, rtol=1e-5, atol=1e-4)


def test_regions_started_from_two_threads_at_once_each_get_their_own_answer(thread_count: None) -> None:
    native()
    torch.set_num_threads(2)
    weights = [_weight(seed=10 + i) for i in range(2)]
    xs = [torch.randn(2, weights[0][0].in_features, generator=torch.Generator().manual_seed(20 + i)) for i in range(2)]
    expected = [torch.ops.kvwise.quant_matvec(x, w.blocks, int(KIND), None) for x, (w, _) in zip(xs, weights)]
    failures: list[str] = []

    def repeat(i: int) -> None:
        weight = weights[i][0]
        for _ in range(200):
            if not torch.equal(torch.ops.kvwise.quant_matvec(xs[i], weight.blocks, int(KIND), None), expected[i]):
                failures.append(f"thread {i}")
                return

    threads = [threading.Thread(target=repeat, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []


SHARED_CORE_SCRIPT = """
import os, sys
os.sched_setaffinity(0, {int(sys.argv[1])})  # before torch starts a thread: every thread on one core
import torch
from local_backend.kernels.quantized import QuantizedWeight, QuantType
from tests.local_backend.kernels.test_quantized import native, random_blocks
native()
blocks = random_blocks(QuantType.Q4_1, 1000, 128, seed=3)
weight = torch.from_numpy(blocks)
x = torch.randn(2, 128, generator=torch.Generator().manual_seed(4))
torch.set_num_threads(1)
expected = torch.ops.kvwise.quant_matvec(x, weight, int(QuantType.Q4_1), None)
torch.set_num_threads(3)
assert len(os.sched_getaffinity(0)) == 1
answers = [torch.ops.kvwise.quant_matvec(x, weight, int(QuantType.Q4_1), None) for _ in range(500)]
print("equal" if all(torch.equal(answer, expected) for answer in answers) else "differs")
"""


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="the OS sets no CPU affinity")
def test_a_pool_on_one_core_gives_every_region_its_answer() -> None:
    """Three threads on one core: the caller waits for chunks that workers on its own core hold, and every region
    ends, with the answer. (That it yields its core to them rather than spin out its slice is a timing property.)"""
    native()
    core = min(os.sched_getaffinity(0))
    done = subprocess.run(
        [sys.executable, "-c", SHARED_CORE_SCRIPT, str(core)],
        cwd=Path(__file__).parents[3],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["equal"]
