"""A process's first call: `import sdk` + `sdk.wrap` + the first call of each API, against the bare client's.

    .venv/bin/python -m tests.benchmarks bench_sdk_first_call [--rounds 5]

What an app pays once per process (a CLI, a serverless cold start, a test run): each measurement is
a fresh interpreter that imports the client package, builds the client, wraps it (the wrapped
contender: `import sdk` and `sdk.wrap`) and makes one call of Chat, Responses, legacy Completions
or Messages against the loopback provider simulator (`tests.simulator`), timed from before the
client's import to the end of the call. The issue's target: wrapped within 1.2x of bare. Beside it,
the first call alone (after the imports), where lazily imported modules land.

The cyclic garbage collector's first full pass after the imports falls inside the first call or not
by the phase of its counters: the allocations of `import sdk` bring it one young collection earlier,
and on the first Responses and Messages calls (whose answers build pydantic schemas, many objects)
it then runs there (tens of ms for openai's heap, more for anthropic's); with the collector off,
those first calls cost the bare client's. The bare process pays the same pass a few allocations
later, outside the window.

Bare and wrapped processes alternate, the order flipping each round, so a change in the machine's
load hits both; each figure is the median over the rounds. A first warm-up process per contender
writes the bytecode caches (into a temporary `PYTHONPYCACHEPREFIX`, whatever
`PYTHONDONTWRITEBYTECODE` says: an installed package has its bytecode compiled at install), so no
row pays for compiling sources; without them `import sdk` alone compiles ~40 modules.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TARGET_RATIO = 1.2
"""The issue's bound: wrapped (import sdk + wrap + first call) at most 1.2x the bare client's."""


@dataclass(frozen=True, slots=True)
class FirstCall:
    """One API's first call: the client package and class, and the call's source."""

    api: str
    package: str
    client: str
    call: str


CALLS = (
    FirstCall(
        "chat",
        "openai",
        "OpenAI",
        'client.chat.completions.create(model="gpt-sim-1", messages=[{"role": "user", "content": "What is prefill?"}])',
    ),
    FirstCall("responses", "openai", "OpenAI", 'client.responses.create(model="gpt-sim-1", input="What is prefill?")'),
    FirstCall(
        "completions", "openai", "OpenAI", 'client.completions.create(model="gpt-sim-1", prompt="What is prefill?")'
    ),
    FirstCall(
        "messages",
        "anthropic",
        "Anthropic",
        'client.messages.create(model="claude-sim-1", max_tokens=64,'
        ' messages=[{"role": "user", "content": "What is prefill?"}])',
    ),
)

CHILD = """\
import time
start, cpu = time.perf_counter(), time.process_time()
import {package}
client = {package}.{client}(base_url={base_url!r}, api_key="bench", max_retries=0)
if {wrapped}:
    import sdk
    client = sdk.wrap(client)
ready = time.perf_counter()
{call}
end, cpu_end = time.perf_counter(), time.process_time()
print((end - start) * 1e3, (cpu_end - cpu) * 1e3, (end - ready) * 1e3)
"""
"""A contender's process: nothing imported before `start` but `time` (the interpreter's own start is
the same for both); the figures print after `end`."""


def cpu_model() -> str:
    """The CPU's model name and core count, from /proc/cpuinfo (no torch, no third-party import)."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return "unknown CPU"
    names = [line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")]
    return f"{names[0]} ({len(names)} logical cores)" if names else "unknown CPU"


def measure(first: FirstCall, wrapped: bool, base_url: str, env: dict[str, str]) -> tuple[float, ...]:
    """In a fresh process: ms from the client's import to the end of its first call, the same in the
    process's CPU time (what the machine's other load moves least), and ms of the call alone."""
    code = CHILD.format(package=first.package, client=first.client, base_url=base_url, wrapped=wrapped, call=first.call)
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(
            f"the {first.api} first call failed ({'wrapped' if wrapped else 'bare'}):\n{done.stderr[-2000:]}"
        )
    return tuple(float(value) for value in done.stdout.split())


def main() -> None:
    """Time every API's first call, bare and wrapped, in alternating fresh processes; print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    from tests.simulator import ProviderSimulator

    rows = []
    with ProviderSimulator() as sim, tempfile.TemporaryDirectory(prefix="kvwise-bytecode-") as bytecode:
        env = {name: value for name, value in os.environ.items() if name != "PYTHONDONTWRITEBYTECODE"}
        env["PYTHONPYCACHEPREFIX"] = bytecode
        for first in CALLS:
            base_url = sim.openai_base_url if first.package == "openai" else sim.anthropic_base_url
            for wrapped in (False, True):
                measure(first, wrapped, base_url, env)  # the warm-up: bytecode caches written
            figures: dict[bool, list[tuple[float, ...]]] = {False: [], True: []}
            for round_ in range(args.rounds):
                for wrapped in (False, True) if round_ % 2 == 0 else (True, False):
                    figures[wrapped].append(measure(first, wrapped, base_url, env))
            medians = {w: [statistics.median(f[i] for f in figures[w]) for i in range(3)] for w in (False, True)}
            rows.append((first.api, medians[False], medians[True]))
    print(f"\nfirst call in a fresh process, ms (median of {args.rounds} rounds); CPU: {cpu_model()}")
    print("from the client's import to the end of its first call, wall-clock and the process's CPU time;")
    print(
        f"wrapped adds import sdk + sdk.wrap; target: wrapped <= {TARGET_RATIO}x bare;"
        " last columns: the call alone (wall)"
    )
    print(
        f"\n{'api':<12} {'bare':>6} {'wrapped':>8} {'x bare':>7}"
        f"   {'bare cpu':>8} {'wrapped cpu':>11} {'x bare':>7}"
        f"   {'call bare':>9} {'wrapped':>8}"
    )
    for api, bare, wrapped in rows:
        cells = []
        for index in (0, 1):
            ratio = wrapped[index] / bare[index]
            cells.append(f"{ratio:7.2f} {'ok' if ratio <= TARGET_RATIO else 'OVER':<4}")
        print(
            f"{api:<12} {bare[0]:6.0f} {wrapped[0]:8.0f} {cells[0]}"
            f" {bare[1]:8.0f} {wrapped[1]:11.0f} {cells[1]}"
            f" {bare[2]:9.0f} {wrapped[2]:8.0f}"
        )


if __name__ == "__main__":
    main()
