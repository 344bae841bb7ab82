"""The suite's tiers (tests/conftest.py): each names paths that exist, every test under a tier's paths
(or using the browser) carries its marker, and `make test-fast` leaves out exactly those tiers."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.conftest import TIERS

TESTS = Path(__file__).parent
FAST = "not integration and not browser and not slow"
"""`make test-fast`'s marker expression (the Makefile's test-fast target)."""


def test_every_tier_names_paths_that_exist():
    assert [path for paths in TIERS.values() for path in paths if not (TESTS / path).exists()] == []


def test_the_makefile_runs_the_fast_tier_with_this_expression():
    assert f'-m "{FAST}"' in (TESTS.parent / "Makefile").read_text()


def test_each_test_carries_the_tiers_of_its_path_and_the_browser_tier_where_it_uses_the_browser():
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "-p", "tests.tier_probe"],
        cwd=TESTS.parent,
        capture_output=True,
        text=True,
        check=True,
    )
    rows = [line.split("\t")[1:] for line in result.stdout.splitlines() if line.startswith("TIER\t")]
    assert len(rows) > 1000
    # openai's and anthropic's own suites run in the conformance tier (`make test-conformance`), not here
    assert [nodeid for nodeid, _, _ in rows if not nodeid.startswith("tests/")] == []
    wrong, fast = [], 0
    for nodeid, tiers, uses_browser in rows:
        where = nodeid.split("::")[0].removeprefix("tests/")
        expected = {
            tier for tier, paths in TIERS.items() if any(where == p or where.startswith(f"{p}/") for p in paths)
        }
        if uses_browser == "1":
            expected.add("browser")
        if set(filter(None, tiers.split(","))) != expected:
            wrong.append((nodeid, tiers, sorted(expected)))
        fast += not expected & {"integration", "browser", "slow"}
    assert wrong == []
    assert 0 < fast < len(rows)
    assert any(
        uses_browser == "1" and nodeid.startswith("tests/sdk/report/test_report.py") for nodeid, _, uses_browser in rows
    )
