"""docs/benchmarks.md: the one place measured figures live, written by `make bench`.

Each benchmark's section holds the table it printed, under the machine it ran on (CPU model, the
vector capability torch reports, cores, load, date, commit), so a figure is never read without its
machine and never goes stale in a docstring. Running one benchmark rewrites only its own section.
"""

from __future__ import annotations

import datetime
import os
import platform
import re
import subprocess
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "benchmarks.md"
TITLE = (
    "# Benchmark figures\n\nWritten by `make bench` (`python -m tests.benchmarks [NAME ...]`); do not edit by hand.\n"
)
_SECTION = re.compile(r"^## (\S+)\n.*?(?=^## |\Z)", re.M | re.S)


def cpu_model() -> str:
    """The CPU's model name, as lscpu and /proc/cpuinfo give it."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def vector_capability() -> str:
    """`torch.backends.cpu.get_cpu_capability()` (AVX512, AVX2, ...), or why it is not known."""
    try:
        import torch

        return str(torch.backends.cpu.get_cpu_capability())
    except Exception as error:  # torch absent or too old: the section says so
        return f"unknown ({type(error).__name__})"


def commit() -> str:
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True, cwd=DOC.parent
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def machine_line() -> str:
    load = ", ".join(f"{value:.2f}" for value in os.getloadavg())
    when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    return (
        f"{cpu_model()}; torch capability {vector_capability()}; {os.cpu_count()} cores; load {load}; "
        f"{when}; commit {commit()}"
    )


def section(name: str, output: str, machine: str) -> str:
    """A benchmark's section: its name, the machine, and what it printed, verbatim."""
    return f"## {name}\n\n{machine}\n\n```\n{output.strip()}\n```\n\n"


def replace_section(document: str, name: str, body: str) -> str:
    """`document` with `name`'s section replaced by `body` (added, in name order, if it had none);
    every other section is kept as it was."""
    sections = {match[1]: match[0] for match in _SECTION.finditer(document)}
    sections[name] = body
    return TITLE + "\n" + "".join(sections[key] for key in sorted(sections))


def record(name: str, output: str, path: Path = DOC) -> None:
    """Write `name`'s printed `output` into its section of `path`, under this machine."""
    old = path.read_text() if path.exists() else ""
    path.write_text(replace_section(old, name, section(name, output, machine_line())))
