"""What a person sees in Phoenix: the trace page rendered by headless Chromium (Debian's `chromium`)."""

from __future__ import annotations

import html
import re
from pathlib import Path

from sdk.telemetry import semconv as sc
from tests.browser import PNG_MAGIC, render
from tests.integration.conftest import MODEL, PROJECT, Traced, span_id, trace_id

ARTIFACTS = Path(__file__).parent / "artifacts"
SCREENSHOT = ARTIFACTS / "phoenix-trace.png"
DOM = ARTIFACTS / "phoenix-trace.html"
TOTAL_COST = re.compile(r">Total Cost</h3><span[^>]*>([^<]*)</span>")
"""The trace header's "Total Cost" value, as Phoenix renders it."""
UNDER_A_CENT = "<$0.01"
"""How Phoenix shows a cost above zero and under a cent (zero is `$0`, no cost at all `--`)."""
CENT = 0.01


def test_the_trace_page_shows_the_call_its_phases_its_token_count_and_its_cost(traced: Traced, browser: str, tmp_path: Path) -> None:
    root = traced.roots["cached"]
    url = traced.phoenix.trace_url(PROJECT, trace_id(root))
    dom = render(browser, url, tmp_path / "dom-profile", "--dump-dom")
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
    render(browser, url, tmp_path / "screenshot-profile", f"--screenshot={SCREENSHOT}")
    assert SCREENSHOT.read_bytes().startswith(PNG_MAGIC)
