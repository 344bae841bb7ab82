"""Headless Chromium (Debian's `chromium`, installed by `make test`) rendering a page for the browser tests."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

BROWSER = "chromium"
FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
)  # fmt: skip
"""Headless on a closed network: no background connections, no sandbox (root in CI), no GPU."""
RENDER_BUDGET_MS = 20_000
"""Virtual time the page gets to run its scripts and queries before the DOM or screenshot is taken."""
WINDOW_SIZE = "1600,1000"
BROWSER_TIMEOUT_S = 120
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def browser() -> str:
    path = shutil.which(BROWSER)
    if path is None:
        pytest.fail(f"no `{BROWSER}` on PATH: install Debian's (`apt-get install -y chromium`, as `make test` does)")
    return path


def render(browser: str, url: str, profile: Path, *output: str, window_size: str = WINDOW_SIZE) -> str:
    """Run headless Chromium on `url` with a fresh profile; return its stdout (the DOM with --dump-dom)."""
    command = [browser, *FLAGS, f"--user-data-dir={profile}", f"--virtual-time-budget={RENDER_BUDGET_MS}",
               f"--window-size={window_size}", *output, url]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, timeout=BROWSER_TIMEOUT_S)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout
