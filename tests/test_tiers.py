"""The suite's tiers (tests/conftest.py): each names paths that exist, and `make test-fast`'s marker
expression leaves out exactly the tests of the tiers it names."""

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


def _collected(*args: str) -> set[str]:
    result = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *args],
                            cwd=TESTS.parent, capture_output=True, text=True, check=True)
    return {line for line in result.stdout.splitlines() if "::" in line}


def test_the_fast_tier_leaves_out_the_slow_integration_and_browser_tests_and_nothing_else():
    every, fast = _collected(), _collected("-m", FAST)
    assert fast and every - fast == _collected("-m", "integration or browser or slow")
    named = tuple(path for tier in ("integration", "slow") for path in TIERS[tier])
    assert not [test for test in fast if test.removeprefix("tests/").startswith(named)]
    assert "tests/sdk/test_report.py" in {test.split("::")[0] for test in every - fast}  # its page tests use the browser
