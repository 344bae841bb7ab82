"""`python -m tests.benchmarks [NAME ...]`: run every `bench_*.py` (or the named ones) in its own process.

Each runs alone so one benchmark's instrumentation (OpenLLMetry does not unwrap) or threads cannot
skew another's figures. OpenMP threads are told to sleep, not spin, when idle (`OMP_WAIT_POLICY=PASSIVE`,
unless set): on a small shared machine spinning workers cost the engine and transformers alike
12-15 ms per small parallel op, which would measure the machine's load rather than the code. The
servers a benchmark starts (`bench_vllm`'s) run without it, as users start them: there a sleeping
worker is woken at each of a step's parallel regions (PASSIVE cost kvwise's server 94 -> 114 ms of
TTFT at 128 tokens, 269 -> 307 at 512), which measured the runner's setting rather than the server.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

from tests.benchmarks import RUNNER_DEFAULTS_ENV

DEFAULTS = {"OMP_WAIT_POLICY": "PASSIVE"}


def main() -> int:
    here = pathlib.Path(__file__).parent
    names = sys.argv[1:] or sorted(path.stem for path in here.glob("bench_*.py") if not path.stem.endswith("_cuda"))
    added = {name: value for name, value in DEFAULTS.items() if name not in os.environ}
    env = {**os.environ, **added, RUNNER_DEFAULTS_ENV: ",".join(added)}
    failed = 0
    for name in names:
        print(f"\n=== {name} ===", flush=True)
        failed += subprocess.call([sys.executable, "-m", f"tests.benchmarks.{name}"], env=env) != 0
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
