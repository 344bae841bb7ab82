"""`python -m tests.benchmarks [NAME ...]`: run every `bench_*.py` (or the named ones) in its own process.

Each runs alone so one benchmark's instrumentation (OpenLLMetry does not unwrap) or threads cannot
skew another's figures.
"""

from __future__ import annotations

import pathlib
import subprocess
import sys


def main() -> int:
    here = pathlib.Path(__file__).parent
    names = sys.argv[1:] or sorted(path.stem for path in here.glob("bench_*.py") if not path.stem.endswith("_cuda"))
    failed = 0
    for name in names:
        print(f"\n=== {name} ===", flush=True)
        failed += subprocess.call([sys.executable, "-m", f"tests.benchmarks.{name}"]) != 0
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
