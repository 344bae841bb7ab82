"""`kvwise report`: read spans, print the summary, write the figures and the HTML page."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, TextIO

from sdk.report.build import Report, build, summary
from sdk.report.phoenix import PhoenixError, read_phoenix
from sdk.report.spans import RawSpan, calls, from_readable, read_otlp_json

PHOENIX_DEFAULT_PROJECT = "default"
"""Where Phoenix files spans that name no project."""
NEEDS_MATPLOTLIB = "the figures and the page need matplotlib: pip install 'kvwise[report]'"


def write_page(report: Report, out: Path) -> Path:
    """Write the figures and `report.html` under `out`; return the page's path (needs matplotlib)."""
    from sdk.report.figures import write_figures
    from sdk.report.page import render

    figures = write_figures(report, out)
    page = out / "report.html"
    page.write_text(render(report, figures), encoding="utf-8")
    return page


def write_report(spans: Iterable[RawSpan], out: Path) -> tuple[Report, Path]:
    """Build the report of `spans` and write it under `out` (`report.html` and the PNGs beside it)."""
    report = build(calls(spans))
    return report, write_page(report, out)


def write_report_from_spans(spans: Iterable[Any], out: Path) -> tuple[Report, Path]:
    """The same from in-process OpenTelemetry SDK spans (e.g. `InMemorySpanExporter.get_finished_spans()`)."""
    return write_report(from_readable(spans), out)


def progress_bar(stream: TextIO, label: str) -> Callable[[int, int], None]:
    """A one-line percentage on `stream`, rewritten only when the whole percent changes.

    With a total of 0 (a source that does not know its size) it shows the count read so far instead.
    """
    shown = -1

    def show(done: int, total: int) -> None:
        nonlocal shown
        if not total:
            stream.write(f"\r{label}: {done} spans")
            stream.flush()
            return
        percent = done * 100 // total
        if percent != shown:
            shown = percent
            stream.write(f"\r{label}: {percent:3d}%" + ("\n" if percent == 100 else ""))
            stream.flush()

    return show


def main(argv: Sequence[str] | None = None) -> int:
    """The `kvwise` command; without matplotlib it still prints the summary, then exits 1."""
    parser = argparse.ArgumentParser(prog="kvwise", description="kvwise's tools")
    commands = parser.add_subparsers(dest="command", required=True)
    command = commands.add_parser("report", help="diagnose prefill, decode and the cache from kvwise's spans")
    source = command.add_mutually_exclusive_group(required=True)
    source.add_argument("traces", type=Path, nargs="?", help="an OTLP/JSON file (the collector's file exporter output)")
    source.add_argument(
        "--phoenix", metavar="URL", help="a running Arize Phoenix to read instead (e.g. http://127.0.0.1:6006)"
    )
    command.add_argument("--project", default=PHOENIX_DEFAULT_PROJECT, help="the Phoenix project (with --phoenix)")
    command.add_argument("--out", type=Path, default=Path("kvwise-report"), help="folder for report.html and the PNGs")
    args = parser.parse_args(argv)
    label = f"reading {args.phoenix or args.traces}"
    progress = progress_bar(sys.stderr, label) if sys.stderr.isatty() else None
    try:
        spans = (
            read_phoenix(args.phoenix, args.project, progress)
            if args.phoenix
            else read_otlp_json(args.traces, progress)
        )
    except (PhoenixError, OSError, ValueError) as error:
        print(f"kvwise report: {error}", file=sys.stderr)
        return 2
    report = build(calls(spans))
    print(summary(report))
    try:
        page = write_page(report, args.out)
    except ModuleNotFoundError as error:
        if error.name != "matplotlib":
            raise
        print(NEEDS_MATPLOTLIB, file=sys.stderr)
        return 1
    print(f"report: {page}")
    return 0
