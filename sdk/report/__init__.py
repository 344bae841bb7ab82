"""`kvwise report`: the prefill/decode/cache diagnosis drawn from kvwise's own spans.

Reads spans (an OTLP/JSON file, a running Phoenix or in-process OpenTelemetry SDK spans), computes the numbers
(`numbers`, `findings`, `build`), draws PNG figures (`figures`, needs the `report` extra) and one
HTML page (`page`). Nothing here imports matplotlib until a figure is drawn.
"""

from sdk.report.build import Report, build, summary
from sdk.report.cli import write_page, write_report, write_report_from_spans
from sdk.report.phoenix import PhoenixError, read_phoenix
from sdk.report.spans import RawSpan, ReportedCall, calls, from_readable, read_otlp_json

__all__ = [
    "PhoenixError",
    "RawSpan",
    "Report",
    "ReportedCall",
    "build",
    "calls",
    "from_readable",
    "read_otlp_json",
    "read_phoenix",
    "summary",
    "write_page",
    "write_report",
    "write_report_from_spans",
]
