"""What a person sees in Phoenix: the trace page rendered by headless Chromium (Debian's `chromium`)."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

from opentelemetry.sdk.trace import ReadableSpan

from sdk import semconv as sc
from tests.browser import PNG_MAGIC, render
from tests.integration.conftest import CALLS, MODEL, PROJECT, Traced, span_id, trace_id

ARTIFACTS = Path(__file__).parent / "artifacts"
SCREENSHOT = ARTIFACTS / "phoenix-trace.png"
DOM = ARTIFACTS / "phoenix-trace.html"
TOTAL_COST = re.compile(r">Total Cost</h3><span[^>]*>([^<]*)</span>")
"""The trace header's "Total Cost" value, as Phoenix renders it."""
UNDER_A_CENT = "<$0.01"
"""How Phoenix shows a cost above zero and under a cent (zero is `$0`, no cost at all `--`)."""
CENT = 0.01
QUESTION = dict(CALLS)["captured"]["messages"][-1]["content"]
"""The user's message of the captured call, and of the `cached` call that sent the same request uncaptured."""
LISTS = re.compile(r"<table\b.*?</table>", re.S)
"""The tables of a Phoenix page: the project's spans and traces listed behind the open trace."""
TAG = re.compile(r"<[^>]+>")
NODE_ID_QUERY = "query ($spanId: String!) { getSpanByOtelId(spanId: $spanId) { id } }"
"""Phoenix's own id of a span (what its page's `selectedSpanNodeId` names), by the span's OTel id."""


def _page(
    traced: Traced, browser: str, root: ReadableSpan, tmp_path: Path, selected: ReadableSpan | None = None
) -> str:
    """The text of `root`'s trace page with `selected` (default: the root) open in the span details,
    without the project's span list behind the trace (it lists every call's output)."""
    url = traced.phoenix.trace_url(PROJECT, trace_id(root))
    if selected is not None:
        node = traced.phoenix.graphql(NODE_ID_QUERY, spanId=span_id(selected))["getSpanByOtelId"]["id"]
        url += f"?selectedSpanNodeId={node}"
    dom = render(browser, url, tmp_path / f"profile-{span_id(selected or root)}", "--dump-dom")
    return html.unescape(TAG.sub("", LISTS.sub("", dom)))


def _answer(root: ReadableSpan) -> str:
    """The captured answer's text, as the call span carries it."""
    [message] = json.loads(str((root.attributes or {})[sc.GEN_AI_OUTPUT_MESSAGES]))
    return "".join(part["content"] for part in message["parts"] if part["type"] == "text")


def _phase(traced: Traced, root: ReadableSpan, name: str) -> ReadableSpan:
    [phase] = [
        span
        for span in traced.sent.values()
        if span.name == name and span.parent is not None and span.parent.span_id == root.context.span_id
    ]
    return phase


def test_the_trace_page_shows_the_call_its_phases_its_token_count_and_its_cost(
    traced: Traced, browser: str, tmp_path: Path
) -> None:
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


def test_with_capture_on_the_span_page_shows_the_users_message_and_the_answers_text(
    traced: Traced, browser: str, tmp_path: Path
) -> None:
    root = traced.roots["captured"]
    answer = _answer(root)
    assert answer.strip(), "the tiny model answered nothing to show"
    dom = _page(traced, browser, root, tmp_path)
    assert QUESTION in dom, "the user's message is not on the captured call's page"
    assert answer.strip() in dom, f"the answer {answer!r} is not on the captured call's page"


def test_with_capture_off_the_span_page_shows_neither_the_users_message_nor_the_answer(
    traced: Traced, browser: str, tmp_path: Path
) -> None:
    answer = _answer(traced.roots["captured"])  # the same request's answer, captured
    dom = _page(traced, browser, traced.roots["cached"], tmp_path)
    assert f"chat {MODEL}" in dom  # the page itself rendered
    assert QUESTION not in dom
    assert answer.strip() not in dom


def test_the_phase_spans_pages_show_their_token_counts(traced: Traced, browser: str, tmp_path: Path) -> None:
    root = traced.roots["cached"]
    prefill, decode = _phase(traced, root, "prefill"), _phase(traced, root, "decode")
    facts = {name: dict(span.attributes or {}) for name, span in (("prefill", prefill), ("decode", decode))}
    assert facts["prefill"][sc.KVWISE_PREFILL_CACHED_TOKENS] > 0 and facts["decode"][sc.KVWISE_DECODE_TOKENS] > 0
    shown_keys = (
        (prefill, (sc.KVWISE_PREFILL_TOKENS, sc.KVWISE_PREFILL_CACHED_TOKENS)),
        (decode, (sc.KVWISE_DECODE_TOKENS,)),
    )
    for span, keys in shown_keys:
        dom = _page(traced, browser, root, tmp_path, selected=span)
        for key in keys:
            shown = f'"{key}": {(span.attributes or {})[key]}'  # the span's output, as Phoenix pretty-prints JSON
            assert shown in dom, f"{shown!r} is not on the {span.name} span's page"


def test_a_screenshot_of_the_captured_calls_trace_page_is_kept_as_an_artifact(
    traced: Traced, browser: str, tmp_path: Path
) -> None:
    url = traced.phoenix.trace_url(PROJECT, trace_id(traced.roots["captured"]))
    ARTIFACTS.mkdir(exist_ok=True)
    SCREENSHOT.unlink(missing_ok=True)
    render(browser, url, tmp_path / "screenshot-profile", f"--screenshot={SCREENSHOT}")
    assert SCREENSHOT.read_bytes().startswith(PNG_MAGIC)
