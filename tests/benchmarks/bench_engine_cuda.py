"""The engine against transformers `generate()` on a GPU: bf16, same checkpoint and measures.

Run on a machine with CUDA (`python tests/benchmarks/bench_engine_cuda.py` or through
`python -m tests.benchmarks`); without one it says so and returns. The measures, checkpoint and
table are those of `bench_engine.py`; only the device and dtype differ.
"""

from __future__ import annotations

import torch

if __package__:
    from .bench_engine import run
else:  # run as a script: bench_engine.py sits beside this file on sys.path
    from bench_engine import run


def main() -> None:
    if not torch.cuda.is_available():
        print("bench_engine_cuda: no CUDA device; skipped")
        return
    run("cuda", torch.bfloat16, f"CUDA bf16, {torch.cuda.get_device_name()}")


if __name__ == "__main__":
    main()
