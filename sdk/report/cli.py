"""`kvwise report`: read spans, write the figures and the HTML page, print the summary."""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from sdk.report.build import Report, build, summary
from sdk.report.spans import RawSpan, calls, from_readable, read_otlp_json


def write_report(spans: Iterable[RawSpan], out: Path) -> tuple[Report, Path]:
    """Build the report of `spans` and write it under `out` (`report.html` and the PNGs beside it)."""
    from sdk.report.figures import write_figures
    from sdk.report.page import render

    report = build(calls(spans))
    figures = write_figures(report, out)
    page = out / "report.html"
    page.write_text(render(report, figures), encoding="utf-8")
    return report, page


def write_report_from_spans(spans: Iterable[Any], out: Path) -> tuple[Report, Path]:
    """The same from in-process OpenTelemetry SDK spans (e.g. `InMemorySpanExporter.get_finished_spans()`)."""
    return write_report(from_readable(spans), out)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="kvwise", description="kvwise's tools")
    commands = parser.add_subparsers(dest="command", required=True)
    report = commands.add_parser("report", help="diagnose prefill, decode and the cache from kvwise's spans")
    report.add_argument("traces", type=Path, help="an OTLP/JSON file (the collector's file exporter output)")
    report.add_argument("--out", type=Path, default=Path("kvwise-report"), help="folder for report.html and the PNGs")
    args = parser.parse_args(argv)
    built, page = write_report(read_otlp_json(args.traces), args.out)
    print(summary(built))
    print(f"report: {page}")
    return 0
