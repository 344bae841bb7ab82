"""`kvwise report` from spans of real wrapped calls against the provider simulator, captured by the real
OpenTelemetry SDK: the numbers, the findings, the figures, the page, the OTLP/JSON file route."""

from __future__ import annotations

import base64
import dataclasses
import io
import json
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from html import escape
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest
from google.protobuf import json_format
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from PIL import Image

import sdk
from sdk import report
from sdk import semconv as sc
from sdk.report.cli import NEEDS_MATPLOTLIB, main, progress_bar
from sdk.report.figures import TITLES
from tests.browser import PNG_MAGIC, layout, render
from tests.sdk.helpers import LONG_SYSTEM
from tests.simulator.simulator import ProviderSimulator

GPT, CLAUDE = "gpt-4o-mini", "claude-sonnet-4-6"
PREFILL_S_PER_TOKEN = 2e-4
"""The simulator's prefill cost: 200 ms per 1k uncached tokens, far above loopback noise."""
OTHER_SYSTEM = " ".join(f"Policy {i}: cite the cache figures you read, and nothing else." for i in range(160))
SHORT_SYSTEM = " ".join(f"Note {i}: be brief about prefill and decode." for i in range(90))
ARTIFACTS = Path(__file__).parents[2] / "integration" / "artifacts"
SCREENSHOT = ARTIFACTS / "kvwise-report.png"
SCREENSHOT_SIZE = "1100,2600"
NARROW_SIZE = "640,1600"
"""A narrow window (half a laptop screen): the page's lines must still fit its width."""
LONG_FAMILY = "conversation-" + "0123456789abcdef" * 8
"""A conversation id with no place to break a line."""
FIGURE_COLOURS = ((31, 119, 180), (255, 127, 14), (44, 160, 44), (214, 39, 40))
"""matplotlib's first four fill colours (tab:blue, orange, green, red): on the page only inside figures."""
FIGURE_PIXELS = 1000


@dataclass
class Workload:
    """The spans of the workload, and the usage each call's answer reported to the caller."""

    spans: tuple[ReadableSpan, ...]
    gpt_usage: list[Any]
    claude_usage: list[Any]


def _run_workload(
    simulator: ProviderSimulator,
    tracer_provider: TracerProvider,
    meter_provider: MeterProvider,
    exporter: InMemorySpanExporter,
) -> Workload:
    """Streamed GPT calls whose system prompt changes twice (hits between), Claude calls that read their
    cache, and a Claude stream that loops until the loop guard cuts it."""
    simulator.prefill_delay_per_token = PREFILL_S_PER_TOKEN
    gpt = sdk.wrap(
        openai.OpenAI(base_url=simulator.openai_base_url, api_key="k", max_retries=0),
        tracer_provider=tracer_provider,
        meter_provider=meter_provider,
    )
    claude = sdk.wrap(
        anthropic.Anthropic(base_url=simulator.anthropic_base_url, api_key="k", max_retries=0),
        tracer_provider=tracer_provider,
        meter_provider=meter_provider,
    )
    gpt_usage = []
    for system in (LONG_SYSTEM, LONG_SYSTEM, OTHER_SYSTEM, OTHER_SYSTEM, SHORT_SYSTEM, SHORT_SYSTEM):
        chunks = list(
            gpt.chat.completions.create(
                model=GPT,
                stream=True,
                stream_options={"include_usage": True},
                messages=[{"role": "system", "content": system}, {"role": "user", "content": "What is prefill?"}],
            )
        )
        gpt_usage.append(chunks[-1].usage)
    claude_usage = []
    for _ in range(2):
        answer = claude.messages.create(
            model=CLAUDE, max_tokens=64, system=LONG_SYSTEM, messages=[{"role": "user", "content": "And decode?"}]
        )
        claude_usage.append(answer.usage)
    simulator.loop("I keep saying this. ")
    with claude.messages.stream(
        model=CLAUDE, max_tokens=2000, system=LONG_SYSTEM, messages=[{"role": "user", "content": "Talk."}]
    ) as stream:
        list(stream.text_stream)
    simulator.loop(None)
    return Workload(exporter.get_finished_spans(), gpt_usage, claude_usage)


@pytest.fixture(scope="module")
def workload() -> Iterator[Workload]:
    """One run of the workload for the whole module (the reports only read its spans)."""
    exporter = InMemorySpanExporter()
    tracer_provider, meter_provider = TracerProvider(), MeterProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    with ProviderSimulator() as simulator:
        yield _run_workload(simulator, tracer_provider, meter_provider, exporter)
    tracer_provider.shutdown()
    meter_provider.shutdown()


def _otlp_json_lines(spans: tuple[ReadableSpan, ...]) -> str:
    """The spans as the collector's file exporter writes them: OTLP/JSON, ids in hex, one request per line."""
    request = json_format.MessageToDict(encode_spans(spans))
    for resource in request["resourceSpans"]:
        for scope in resource["scopeSpans"]:
            for span in scope["spans"]:
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in span:
                        span[key] = base64.b64decode(span[key]).hex()
    return json.dumps(request) + "\n"


def _by_model(items: Any) -> dict[str, Any]:
    return {item.model: item for item in items}


def test_the_fitted_prefill_cost_is_the_simulators_per_token_cost_within_ten_percent(workload: Workload) -> None:
    built = report.build(report.calls(report.from_readable(workload.spans)))
    assert built.fit is not None
    assert built.fit.points == 7  # six GPT streams and the looping Claude stream
    assert built.fit.slope_s_per_token == pytest.approx(PREFILL_S_PER_TOKEN, rel=0.10)


def test_the_table_has_each_conversations_hit_ratio_from_the_answers_usage_and_its_most_frequent_break(
    workload: Workload,
) -> None:
    built = report.build(report.calls(report.from_readable(workload.spans)))
    families = {family.conversation: family for family in built.conversations}
    assert set(families) == {GPT, CLAUDE}
    gpt = families[GPT]
    read = sum(usage.prompt_tokens_details.cached_tokens for usage in workload.gpt_usage)
    assert gpt.hit_ratio == pytest.approx(read / sum(usage.prompt_tokens for usage in workload.gpt_usage))
    assert 0 < gpt.hit_ratio < 1
    assert (gpt.calls, gpt.breaks, gpt.top_cause, gpt.top_cause_count, gpt.top_break_at) == (
        6,
        2,
        "system_changed",
        2,
        "system[0]",
    )
    assert [point.cause is not None for point in built.hits[GPT]] == [False, False, True, False, True, False]
    assert families[CLAUDE].calls == 3
    assert [family.spend_usd for family in built.conversations] == sorted(
        (family.spend_usd for family in built.conversations), reverse=True
    )


def test_the_cost_split_per_model_adds_up_to_the_spans_cost_and_names_the_savings_and_decode_share(
    workload: Workload,
) -> None:
    built = report.build(report.calls(report.from_readable(workload.spans)))
    costs = _by_model(built.costs)
    assert set(costs) == {GPT, CLAUDE}
    calls = [s for s in workload.spans if s.name.startswith("chat ")]
    for model, cost in costs.items():
        spans = [s.attributes for s in calls if s.attributes[sc.GEN_AI_REQUEST_MODEL] == model]
        assert cost.cost.total_usd == pytest.approx(sum(a[sc.KVWISE_COST_USD] for a in spans))
        assert cost.cost.saved_usd > 0 and cost.cost.cached_input_usd > 0
        assert cost.decode_share == pytest.approx(cost.cost.output_usd / cost.cost.total_usd)
    claude_reads = sum(usage.cache_read_input_tokens for usage in workload.claude_usage)
    assert claude_reads > 0


def test_the_loop_guard_cut_is_counted_with_the_tokens_it_saved_and_named_in_the_findings(
    workload: Workload,
) -> None:
    built = report.build(report.calls(report.from_readable(workload.spans)))
    decode = _by_model(built.decode)
    [cut] = [s.attributes for s in workload.spans if s.attributes and sc.KVWISE_GUARD_TRIPPED in s.attributes]
    assert (decode[CLAUDE].guard_cuts, decode[CLAUDE].guard_tokens_saved) == (1, cut[sc.KVWISE_GUARD_TOKENS_SAVED])
    assert cut[sc.KVWISE_GUARD_TOKENS_SAVED] > 0 and decode[GPT].guard_cuts == 0
    assert decode[GPT].tokens_per_s is not None and decode[GPT].tokens_per_s > 0
    assert (
        f"{CLAUDE}: the loop guard cut 1 runaway answer(s), saving {cut[sc.KVWISE_GUARD_TOKENS_SAVED]} output tokens."
        in built.findings
    )
    assert (
        f"conversation {GPT} broke its cache 2 times on `system_changed` in system[0]: "
        "the system prompt changed; keep it fixed and put per-call text in the last user turn." in built.findings
    )


def test_every_figure_is_a_png_matplotlib_reads_back_with_its_title_and_the_page_embeds_them(
    workload: Workload, tmp_path: Path
) -> None:
    from matplotlib import image

    built, page = report.write_report_from_spans(workload.spans, tmp_path)
    pngs = sorted(tmp_path.glob("*.png"))
    assert [path.stem for path in pngs] == sorted(TITLES)
    for path in pngs:
        assert path.read_bytes()[:8] == PNG_MAGIC
        assert image.imread(path).shape[0] > 0
        with Image.open(path) as png:
            assert png.text["Title"] == TITLES[path.stem]
    html = page.read_text(encoding="utf-8")
    assert html.count("data:image/png;base64,") == len(TITLES)
    assert all(f"<h2>{title}</h2>" in html for title in TITLES.values())
    assert "<td>system_changed</td>" in html and f"<td>{GPT}</td>" in html
    assert built.findings and all(f"<li>{escape(finding)}</li>" in html for finding in built.findings)


def test_an_otlp_json_file_of_the_same_spans_gives_the_same_report_through_the_cli(
    workload: Workload, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    traces = tmp_path / "traces.jsonl"
    traces.write_text(_otlp_json_lines(workload.spans), encoding="utf-8")
    from_memory = report.build(report.calls(report.from_readable(workload.spans)))
    from_file = report.build(report.calls(report.read_otlp_json(traces)))
    assert from_file == from_memory
    assert main(["report", str(traces), "--out", str(tmp_path / "out")]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith(f"{len(from_memory.calls)} calls, $")
    assert f"report: {tmp_path / 'out' / 'report.html'}" in printed
    assert (tmp_path / "out" / "report.html").is_file()


def test_reading_a_trace_file_reports_its_progress_up_to_the_whole_file_and_the_bar_ends_at_100_percent(
    workload: Workload, tmp_path: Path
) -> None:
    traces = tmp_path / "traces.jsonl"
    traces.write_text(_otlp_json_lines(workload.spans[:4]) + _otlp_json_lines(workload.spans[4:]), encoding="utf-8")
    seen: list[tuple[int, int]] = []
    assert len(report.read_otlp_json(traces, lambda done, total: seen.append((done, total)))) == len(workload.spans)
    size = traces.stat().st_size
    assert len(seen) == 2 and seen[0][0] < size and seen[-1] == (size, size)
    screen = io.StringIO()
    bar = progress_bar(screen, "reading")
    for done in (0, 1, 1, 2):
        bar(done, 2)
    assert screen.getvalue() == "\rreading:   0%\rreading:  50%\rreading: 100%\n"
    unsized = io.StringIO()
    count = progress_bar(unsized, "reading")
    for done in (1000, 1400):  # Phoenix's pages: no total, the count so far
        count(done, 0)
    assert unsized.getvalue() == "\rreading: 1000 spans\rreading: 1400 spans"


def test_a_trace_file_that_is_missing_or_not_json_is_a_clear_error_not_a_traceback(tmp_path: Path) -> None:
    broken = tmp_path / "broken.jsonl"
    broken.write_text("{not json\n", encoding="utf-8")
    for path in (tmp_path / "missing.jsonl", broken):
        result = subprocess.run(
            [sys.executable, "-m", "sdk.report", str(path), "--out", str(tmp_path / "out")],
            capture_output=True,
            text=True,
            cwd=Path(__file__).parents[3],
            check=False,
        )
        assert (
            result.returncode == 2 and result.stderr.startswith("kvwise report: ") and "Traceback" not in result.stderr
        )


def test_headless_chromium_renders_the_page_with_its_figures_table_and_findings(
    workload: Workload, tmp_path: Path, browser: str
) -> None:
    """The screenshot is kept as an artifact; the README shows one (docs/kvwise-report.png)."""
    built, page = report.write_report_from_spans(workload.spans, tmp_path / "report")
    dom = render(browser, page.as_uri(), tmp_path / "dom-profile", "--dump-dom")
    tables = sum(len(rows) + 1 for rows in (built.conversations, built.misses, built.families))  # rows + header
    assert dom.count("<img ") == len(TITLES) and dom.count("<tr>") == tables
    assert all(escape(finding) in dom for finding in built.findings)
    ARTIFACTS.mkdir(exist_ok=True)
    SCREENSHOT.unlink(missing_ok=True)
    render(
        browser,
        page.as_uri(),
        tmp_path / "screenshot-profile",
        f"--screenshot={SCREENSHOT}",
        window_size=SCREENSHOT_SIZE,
    )
    assert SCREENSHOT.read_bytes()[:8] == PNG_MAGIC
    with Image.open(SCREENSHOT) as shot:
        assert shot.size == tuple(int(side) for side in SCREENSHOT_SIZE.split(","))
        pixels = {colour: count for count, colour in shot.convert("RGB").getcolors(maxcolors=1 << 22) or []}
    # The figures were drawn, not blank boxes or broken-image icons: each of their fill colours is on screen.
    assert all(pixels.get(colour, 0) > FIGURE_PIXELS for colour in FIGURE_COLOURS), pixels


@pytest.mark.parametrize("family", [None, LONG_FAMILY])
@pytest.mark.parametrize("window_size", [SCREENSHOT_SIZE, NARROW_SIZE])
def test_every_element_of_the_page_fits_the_page_width_and_the_cost_figure_is_drawn(
    workload: Workload, tmp_path: Path, browser: str, window_size: str, family: str | None
) -> None:
    records = report.calls(report.from_readable(workload.spans))
    if family is not None:  # the GPT calls named as one conversation with a long id, in the findings and the table
        records = [
            dataclasses.replace(record, conversation=family) if record.model == GPT else record for record in records
        ]
    page = report.write_page(report.build(records), tmp_path / "report")
    measured = layout(browser, page, tmp_path / "layout-profile", window_size)
    assert measured.width > 0 and measured.page <= measured.width, measured
    assert measured.overflowing == [], measured.overflowing
    assert set(measured.images) == set(TITLES.values())
    assert all(width > 0 for width in measured.images.values()), measured.images
    assert measured.images[TITLES["cost_split"]] > 0


def test_the_cost_picture_writes_each_models_output_to_input_spend_ratio(workload: Workload) -> None:
    built = report.build(report.calls(report.from_readable(workload.spans)))
    for spend in built.costs:
        inputs = spend.cost.input_usd + spend.cost.cached_input_usd + spend.cost.cache_write_usd
        assert spend.input_usd == pytest.approx(inputs) and inputs > 0
        assert spend.output_to_input == pytest.approx(spend.cost.output_usd / inputs)
    from matplotlib.figure import Figure

    from sdk.report.figures import _cost_split

    figure = Figure()
    _cost_split(figure, built)
    written = [text.get_text() for axes in figure.axes for text in axes.texts]
    assert [axes.get_title() for axes in figure.axes] == [
        f"{spend.model} ({spend.calls} calls)" for spend in built.costs
    ]
    for spend in built.costs:
        assert any(f"output = {spend.output_to_input:.2g}x input spend" in text for text in written), written
    assert [len(axes.patches) for axes in figure.axes] == [4] * len(built.costs)  # four kinds of spend, side by side


def test_the_hit_ratio_figure_draws_a_point_per_call_and_no_lines(workload: Workload) -> None:
    built = report.build(report.calls(report.from_readable(workload.spans)))
    from matplotlib.figure import Figure

    from sdk.report.figures import _hit_ratio

    figure = Figure()
    _hit_ratio(figure, built)
    [axes] = figure.axes
    assert axes.get_lines() == []
    by_label = {collection.get_label(): len(collection.get_offsets()) for collection in axes.collections}
    assert by_label == {
        **{family: len(points) for family, points in built.hits.items()},
        "cache break": sum(point.cause is not None for points in built.hits.values() for point in points),
    }


def test_python_m_sdk_report_without_matplotlib_prints_the_summary_and_says_what_to_install(
    workload: Workload, tmp_path: Path
) -> None:
    traces = tmp_path / "traces.jsonl"
    traces.write_text(_otlp_json_lines(workload.spans), encoding="utf-8")
    code = (
        "import runpy, sys; sys.modules['matplotlib'] = None; import sdk\n"
        f"sys.argv = ['sdk.report', {str(traces)!r}, '--out', {str(tmp_path / 'out')!r}]\n"
        "runpy.run_module('sdk.report', run_name='__main__')"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=Path(__file__).parents[3], check=False
    )
    assert (result.returncode, result.stderr.strip()) == (1, NEEDS_MATPLOTLIB)
    assert result.stdout == report.summary(report.build(report.calls(report.from_readable(workload.spans)))) + "\n"
    assert not (tmp_path / "out" / "report.html").exists()
