"""What a person sees in Phoenix: the trace page rendered by headless Chromium (Debian's `chromium`)."""

from __future__ import annotations

import html
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from sdk.telemetry import semconv as sc
from tests.integration.conftest import MODEL, PROJECT, Traced, span_id, trace_id

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
ARTIFACTS = Path(__file__).parent / "artifacts"
SCREENSHOT = ARTIFACTS / "phoenix-trace.png"
DOM = ARTIFACTS / "phoenix-trace.html"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
TOTAL_COST = re.compile(r">Total Cost</h3><span[^>]*>([^<]*)</span>")
"""The trace header's "Total Cost" value, as Phoenix renders it."""
UNDER_A_CENT = "<$0.01"
"""How Phoenix shows a cost above zero and under a cent (zero is `$0`, no cost at all `--`)."""
CENT = 0.01


@pytest.fixture(scope="module")
def browser() -> str:
    path = shutil.which(BROWSER)
    if path is None:
        pytest.fail(f"no `{BROWSER}` on PATH: install Debian's (`apt-get install -y chromium`, as `make test` does)")
    return path


def _render(browser: str, url: str, profile: Path, *output: str) -> str:
    """Run headless Chromium on `url` with a fresh profile; return its stdout (the DOM with --dump-dom)."""
    command = [browser, *FLAGS, f"--user-data-dir={profile}", f"--virtual-time-budget={RENDER_BUDGET_MS}",
               f"--window-size={WINDOW_SIZE}", *output, url]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, timeout=BROWSER_TIMEOUT_S)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def test_the_trace_page_shows_the_call_its_phases_its_token_count_and_its_cost(traced: Traced, browser: str, tmp_path: Path) -> None:
    root = traced.roots["cached"]
    url = traced.phoenix.trace_url(PROJECT, trace_id(root))
    dom = _render(browser, url, tmp_path / "dom-profile", "--dump-dom")
    ARTIFACTS.mkdir(exist_ok=True)
    DOM.write_text(dom)
    total = traced.stored[span_id(root)]["attributes"][sc.LLM_TOKEN_COUNT_TOTAL]
    for text in (f"chat {MODEL}", "prefill", "decode", f">{total}<"):  # the span tree and its token badge
        assert text in dom, f"{text!r} is not on the rendered trace page {url}"
    cost = traced.phoenix.span_cost(span_id(root))  # Phoenix's own pricing of the call, read by GraphQL
    assert cost is not None and 0 < cost < CENT, cost
    shown = TOTAL_COST.search(dom)
    assert shown is not None and html.unescape(shown[1]) == UNDER_A_CENT, f"the trace's Total Cost on {url}"


def test_a_screenshot_of_the_trace_page_is_kept_as_an_artifact(traced: Traced, browser: str, tmp_path: Path) -> None:
    url = traced.phoenix.trace_url(PROJECT, trace_id(traced.roots["cached"]))
    ARTIFACTS.mkdir(exist_ok=True)
    SCREENSHOT.unlink(missing_ok=True)
    _render(browser, url, tmp_path / "screenshot-profile", f"--screenshot={SCREENSHOT}")
    assert SCREENSHOT.read_bytes().startswith(PNG_MAGIC)
