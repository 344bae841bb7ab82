"""The Makefile's `browser` step of `make test`: as a non-root user without Chromium it stops and names the command.

The root branch installs Debian's `chromium` with apt-get, so it is not run here; this one runs the
real recipe with a PATH that has no browser on it and an `id` that answers a non-root uid.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NON_ROOT_UID = 1000
MAKE_TIMEOUT_S = 60


def test_make_test_without_chromium_as_a_non_root_user_stops_with_one_line_naming_the_install_command(tmp_path: Path) -> None:
    make = shutil.which("make")
    assert make is not None, "make is not installed"
    fake_id = tmp_path / "id"
    fake_id.write_text(f"#!/bin/sh\necho {NON_ROOT_UID}\n")
    fake_id.chmod(0o755)
    result = subprocess.run([make, "--no-print-directory", "-C", str(ROOT), "browser"], env={"PATH": str(tmp_path)},
                            capture_output=True, text=True, timeout=MAKE_TIMEOUT_S)  # fmt: skip
    assert result.returncode != 0
    assert result.stdout == ""
    [line, *make_says] = result.stderr.splitlines()
    assert line == "make test needs Debian's chromium: run 'sudo apt-get install -y chromium', then 'make test' again"
    assert all(said.startswith("make: ***") for said in make_says), make_says


def test_make_test_ends_with_the_conformance_tier_which_runs_both_upstream_suites_wrapped() -> None:
    make = shutil.which("make")
    assert make is not None, "make is not installed"
    dry_run = [make, "--no-print-directory", "-n", "-C", str(ROOT), "test"]
    said = subprocess.run(
        dry_run, capture_output=True, text=True, timeout=MAKE_TIMEOUT_S, check=True
    ).stdout.splitlines()
    assert said[-1] == ".venv/bin/python -m tests.conformance.run"
    [sub_make] = [index for index, line in enumerate(said) if line.endswith(" --no-print-directory test-conformance")]
    assert sub_make > said.index(".venv/bin/python -m pytest -q")
