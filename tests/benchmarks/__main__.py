"""`python -m tests.benchmarks [NAME ...]`: run every `bench_*.py` (or the named ones) in its own process.

Each runs alone so one benchmark's instrumentation (OpenLLMetry does not unwrap) or threads cannot
skew another's figures. What each prints is shown as it comes and written into its section of
docs/benchmarks.md (`figures_doc`), under the machine it ran on; a benchmark that fails keeps its
old section. OpenMP threads are told to sleep, not spin, when idle (`OMP_WAIT_POLICY=PASSIVE`,
unless set): on a small shared machine spinning workers would measure the machine's load rather
than the code. The servers a benchmark starts (`bench_vllm`'s) run without it, as users start them:
there a sleeping worker is woken at each of a step's parallel regions, which would measure the
runner's setting rather than the server.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

from tests.benchmarks import RUNNER_DEFAULTS_ENV, figures_doc

DEFAULTS = {"OMP_WAIT_POLICY": "PASSIVE"}


def main() -> int:
    here = pathlib.Path(__file__).parent
    names = sys.argv[1:] or sorted(path.stem for path in here.glob("bench_*.py") if not path.stem.endswith("_cuda"))
    added = {name: value for name, value in DEFAULTS.items() if name not in os.environ}
    env = {**os.environ, **added, RUNNER_DEFAULTS_ENV: ",".join(added)}
    failed = 0
    for name in names:
        print(f"\n=== {name} ===", flush=True)
        process = subprocess.Popen(
            [sys.executable, "-m", f"tests.benchmarks.{name}"], env=env, stdout=subprocess.PIPE, text=True, bufsize=1
        )
        assert process.stdout is not None
        lines = []
        for line in process.stdout:
            print(line, end="", flush=True)
            lines.append(line)
        if process.wait() != 0:
            failed += 1
        else:
            figures_doc.record(name, "".join(lines))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
