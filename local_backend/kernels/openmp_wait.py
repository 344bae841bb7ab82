"""How long torch's idle OpenMP workers spin before they sleep: chosen before torch loads its OpenMP runtime.

torch's CPU ops (ours through `at::parallel_for`, and its GEMMs) run on libgomp; the decode step's own kernels
use `csrc/parallel.h` instead. After each parallel region libgomp's workers spin for `GOMP_SPINCOUNT` pause loops
before sleeping on a futex: 300,000 by default, several milliseconds. A prefill runs hundreds of short regions,
and a batch too large for the decode kernels as many, so a short spin keeps the next region's wake-up
cheap; but a worker spinning for milliseconds takes the core from what else this process runs between
steps (the event loop and the detokenizer, which serve 16 streams) and, on a busy laptop, from the partner
thread it waits for when that one has been descheduled. vLLM-CPU makes the same choice for Intel's runtime
(`KMP_BLOCKTIME=1`: a millisecond). libgomp reads its variables once, when it loads, so this must run before
anything imports torch; a value the user set is kept.
"""

from __future__ import annotations

import os
import sys
from typing import Final

SPIN_COUNT: Final = "20000"
"""Pause loops an idle worker spins (a fraction of a millisecond on current x86 cores) before it sleeps.

Chosen by measurement (docs/benchmarks.md, by_hand, "GOMP_SPINCOUNT"): on SmolLM2's Q4_1 file, 2 cores, quiet
and beside one niced CPU-bound process per core, it served 16 streams faster than the default on both, with
batch-1 decode and cold prefill within the runs' spread; no spin (`OMP_WAIT_POLICY=PASSIVE`) or a 2,000-loop
spin lost decode to wake-ups, and one thread lost a third of prefill.
"""


def choose_spin_count() -> None:
    """Set `GOMP_SPINCOUNT` for this process and its children unless the user did, or torch is already loaded."""
    if "torch" in sys.modules or "OMP_WAIT_POLICY" in os.environ:
        return
    os.environ.setdefault("GOMP_SPINCOUNT", SPIN_COUNT)
