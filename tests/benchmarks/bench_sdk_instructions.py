"""Instructions per call of `sdk.wrap` and its peers, counted by callgrind: a figure load does not move.

    .venv/bin/python -m tests.benchmarks.bench_sdk_instructions [--baseline FOLDER] [--calls 40] [--streams 20]

`bench_sdk_overhead` times the contenders; on a shared 2-core machine its wall-clock and even its
CPU figures move by a millisecond per stream from run to run, more than a regression of the SDK's
own per-chunk work. This benchmark counts the client process's executed instructions instead
(`valgrind --tool=callgrind`), the same on every run. Each contender (`bench_sdk_overhead`'s:
raw, kvwise, the two peers, and with `--baseline` the earlier checkout's sdk as kvwise-base) runs
in a process of its own under callgrind against that benchmark's mock server (in a process of its
own, not counted), warms up, then makes its plain calls inside `functools.reduce` and its 200-chunk
streams inside `sorted(..., key=)`: callgrind's inclusive counts of those two C functions are the
instructions of exactly those calls (imports, set-up and warm-up are not counted). Spans are handed
to a null exporter as they end (`SimpleSpanProcessor`), in the caller's thread and counted: with the
production `BatchSpanProcessor` they queued for an exporter thread, and how many were queued when
the cyclic collector ran moved a stream's figure by up to 0.7 M from run to run of the same code.
A stream's figure still moves, by 0.3-0.7 M, between runs and with the number of streams counted:
the loopback I/O (how the mock server's writes arrive sets how many reads and parser steps the
client makes; raw's figure moves as much) and where the cyclic collector's older generations run
(an in-memory transport, tried, took out the first and not the second: kvwise's stream overhead
then read 1.8 M over the same earlier sdk's in one run and 0.2 M over it in a scratch count).
Read a stream's overhead to ±0.7 M; a call's repeats within about 0.03 M.

Instructions are not time (a cache miss costs more than an add): with `--cache-sim` callgrind also
simulates the caches, and each figure becomes its estimate of cycles, Ir + 10 × first-level misses
+ 100 × last-level misses (callgrind's own weights), twice as slow to count. This is the regression
check; `bench_sdk_overhead` gives the figures in µs.
"""

from __future__ import annotations

import argparse
import functools
import gc
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.benchmarks import bench_sdk_overhead as overhead

CONTENDERS = ("raw", "kvwise", "otel-floor", "otel-floor-genai", "otel-genai", "openllmetry")
"""`otel-floor`: the OpenTelemetry SDK calls that emit what kvwise records around the raw client
(`bench_sdk_overhead.Floor`), the part of kvwise's overhead that is the telemetry's own cost;
`otel-floor-genai`: the same without the OpenInference attributes (the GenAI and kvwise ones only)."""
ENTRY_POINTS = {"functools_reduce": "whole", "builtin_sorted": "stream"}
"""The C function each kind of timed call runs inside, so callgrind counts it apart."""
PARALLEL = 2
"""Contenders counted at once: callgrind runs a process on one core, and the machine has two."""


def work(name: str, port: int, calls: int, streams: int, baseline: str | None) -> None:
    """A contender process (under callgrind): set up, warm up, then the counted calls.

    The heap the set-up left (the imported modules' objects) is frozen out of the cyclic collector
    before counting: otherwise whichever contender's allocations happen to trigger a full
    collection pays millions of instructions for objects that are not its calls', and the figures
    depended on the count.
    Each contender's own garbage is still collected, and counted, as it would be in a long-lived app.
    """
    contender = (
        overhead.Floor(port, openinference=name == "otel-floor", export_in_call=True)
        if name.startswith("otel-floor")
        else overhead.Contender(name, port, baseline, export_in_call=True)
    )
    for _ in range(3):
        contender.whole()
        contender.streamed()
    gc.collect()
    gc.freeze()
    functools.reduce(lambda _, __: contender.whole(), range(calls), None)
    sorted(range(streams), key=lambda i: (contender.streamed(), i)[1])


def count(name: str, common: list[str], out: Path, cache_sim: bool) -> subprocess.Popen[bytes]:
    """Start `name`'s process under callgrind, writing its counts to `out`."""
    return subprocess.Popen(
        [
            "valgrind",
            "--tool=callgrind",
            f"--cache-sim={'yes' if cache_sim else 'no'}",
            f"--callgrind-out-file={out}",
            sys.executable,
            "-m",
            __spec__.name,
            "--contender",
            name,
            *common,
        ],
        cwd=overhead.ROOT,
        env={**os.environ, "PYTHONHASHSEED": "0"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def inclusive(out: Path) -> dict[str, int]:
    """Inclusive counts of the entry points from `callgrind_annotate`: instructions, or with the
    cache simulation callgrind's cycle estimate (Ir + 10 × L1 misses + 100 × last-level misses)."""
    text = subprocess.run(
        ["callgrind_annotate", "--inclusive=yes", "--threshold=100", str(out)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    events: list[str] = []
    found: dict[str, int] = {}
    for line in text.splitlines():
        if line.startswith("Events shown:"):
            events = line.split(":", 1)[1].split()
        match = re.match(r"(.*?)\s(\S+):(\w+) \[", line)
        if not match or match.group(3) not in ENTRY_POINTS:
            continue
        cells = [cell for cell in match.group(1).split() if not cell.startswith("(") and not cell.endswith(")")]
        value = dict(zip(events, (0 if cell == "." else int(cell.replace(",", "")) for cell in cells), strict=True))
        misses = sum(value.get(name, 0) for name in ("I1mr", "D1mr", "D1mw"))
        last_level = sum(value.get(name, 0) for name in ("ILmr", "DLmr", "DLmw"))
        found[ENTRY_POINTS[match.group(3)]] = value["Ir"] + 10 * misses + 100 * last_level
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=40, help="counted plain calls per contender")
    parser.add_argument(
        "--streams",
        type=int,
        default=20,
        help=f"counted {overhead.STREAM_CHUNKS}-chunk streams per contender (the young-generation collections"
        " a stream triggers fall unevenly: a few streams are noisy)",
    )
    parser.add_argument("--baseline", help="a checkout of an earlier commit: its sdk is counted as kvwise-base")
    parser.add_argument("--cache-sim", action="store_true", help="count estimated cycles with simulated caches")
    parser.add_argument("--only", nargs="+", help="count only these contenders (raw is always counted)")
    parser.add_argument("--contender", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.contender:
        work(args.contender, args.port, args.calls, args.streams, args.baseline)
        return
    if shutil.which("valgrind") is None or shutil.which("callgrind_annotate") is None:
        print("valgrind is not installed here: no instruction counts (make bench installs it as root)")
        return
    names = CONTENDERS[:2] + (("kvwise-base",) if args.baseline else ()) + CONTENDERS[2:]
    names = tuple(name for name in names if name == "raw" or not args.only or name in args.only)
    folder = Path(tempfile.mkdtemp(prefix="kvwise-instructions-"))
    port_file = folder / "port"
    server = subprocess.Popen([sys.executable, overhead.__file__, "--serve", str(port_file)], cwd=overhead.ROOT)
    results: dict[str, dict[str, float] | str] = {}
    try:
        while not port_file.exists() or not port_file.read_text():
            time.sleep(0.05)
        common = ["--port", port_file.read_text(), "--calls", str(args.calls), "--streams", str(args.streams)]
        if args.baseline:
            common += ["--baseline", str(Path(args.baseline).resolve())]
        for wave in range(0, len(names), PARALLEL):
            running = {
                name: count(name, common, folder / f"{name}.out", args.cache_sim)
                for name in names[wave : wave + PARALLEL]
            }
            for name, process in running.items():
                _, errors = process.communicate()
                found = inclusive(folder / f"{name}.out") if process.returncode == 0 else {}
                if set(found) == set(ENTRY_POINTS.values()):
                    results[name] = {"whole": found["whole"] / args.calls, "stream": found["stream"] / args.streams}
                else:
                    lines = errors.decode(errors="replace").strip().splitlines()
                    results[name] = lines[-1][:200] if lines else f"exit status {process.returncode}"
    finally:
        server.terminate()
        server.wait()
        shutil.rmtree(folder, ignore_errors=True)
    report(results, "estimated cycles" if args.cache_sim else "instructions")


def report(results: dict[str, dict[str, float] | str], unit: str) -> None:
    raw, kvwise = results.get("raw"), results.get("kvwise")
    if not isinstance(raw, dict):
        print(f"the raw client could not be counted: {raw}")
        return
    print(
        f"\nmillions of {unit} per call in the caller's thread (callgrind); overhead = contender - raw; "
        f"{overhead.STREAM_CHUNKS}-chunk stream\n"
    )
    print(f"{'contender':<17} {'call':>8} {'overhead':>9} {'stream':>8} {'overhead':>9}")
    for name, figures in results.items():
        if isinstance(figures, str):
            print(f"{name:<17} could not be counted: {figures}")
            continue
        print(
            f"{name:<17} "
            + " ".join(f"{figures[k] / 1e6:8.2f} {(figures[k] - raw[k]) / 1e6:+9.2f}" for k in ("whole", "stream"))
        )
    if not isinstance(kvwise, dict):
        return
    for peer in ("kvwise-base", *CONTENDERS[2:]):
        other = results.get(peer)
        if isinstance(other, dict):
            for key, label in (("whole", "call"), ("stream", "stream")):
                ours, theirs = kvwise[key] - raw[key], other[key] - raw[key]
                ratio = f"{theirs / ours:.2f}x kvwise's" if ours > 0 else "kvwise adds none"
                print(f"{peer} {label} overhead: {theirs / 1e6:.2f} M vs kvwise {ours / 1e6:.2f} M {unit} ({ratio})")


if __name__ == "__main__":
    main()
