"""The report as one self-contained HTML page: the figures embedded as data URIs, the tables, the findings."""

from __future__ import annotations

import base64
import html
from collections.abc import Mapping
from pathlib import Path

from sdk.report.build import Report, summary
from sdk.report.figures import TITLES

_STYLE = (
    "*{box-sizing:border-box}body{font-conversation:sans-serif;max-width:60em;margin:2em auto;padding:0 1em;"
    "overflow-wrap:anywhere}table{border-collapse:collapse;max-width:100%}"
    "td,th{border:1px solid #ccc;padding:.3em .6em;text-align:right}td:first-child{text-align:left}"
    "img{display:block;max-width:100%;height:auto}"
)
"""Every line wraps within the page: long words break, the figures scale down to the page's width."""


def render(report: Report, figures: Mapping[str, Path]) -> str:
    """The page's HTML; `figures` by stem as `sdk.report.figures.write_figures` returns them."""
    rows = "".join(
        f"<tr><td>{html.escape(f.conversation)}</td><td>{f.calls}</td><td>${f.spend_usd:.4f}</td>"
        f"<td>{f.hit_ratio:.0%}</td><td>{f.breaks}</td><td>{html.escape(f.top_cause or '-')}</td></tr>"
        for f in report.conversations
    )
    images = "".join(
        f'<h2>{html.escape(TITLES[stem])}</h2><img alt="{html.escape(TITLES[stem])}" '
        f'src="data:image/png;base64,{base64.b64encode(path.read_bytes()).decode("ascii")}">'
        for stem, path in figures.items()
    )
    misses = "".join(
        f"<tr><td>{html.escape(row.cause)}</td><td>{'provider' if row.by_provider else 'explained'}</td>"
        f"<td>{row.calls}</td>"
        f"<td>{row.tokens}</td><td>${row.usd:.4f}</td></tr>"
        for row in report.misses
    )
    families = "".join(
        f"<tr><td>{html.escape(row.family)}</td><td>{row.calls}</td><td>{row.compared}</td>"
        f"<td>{row.kept_mean:.1%}</td><td>{row.kept_lowest:.1%}</td></tr>"
        for row in report.families
    )
    items = "".join(f"<li>{html.escape(finding)}</li>" for finding in report.findings)
    headline = html.escape(summary(report).splitlines()[0])
    return (
        f'<!doctype html><html><head><meta charset="utf-8"><title>kvwise report</title><style>{_STYLE}</style>'
        f"</head><body><h1>kvwise report</h1><p>{headline}</p><h2>Findings</h2><ul>{items}</ul>"
        "<h2>Top conversations by spend</h2><table><tr><th>conversation</th><th>calls</th><th>spend</th>"
        f"<th>hit ratio</th><th>breaks</th><th>most frequent break cause</th></tr>{rows}</table>"
        "<h2>Cache reads the provider missed (apart from the breaks the prompt caused)</h2><table><tr><th>cause</th>"
        f"<th>whose</th><th>calls</th><th>tokens</th><th>paid uncached</th></tr>{misses}</table>"
        "<h2>Stable prefix kept per prompt family</h2><table><tr><th>family</th><th>calls</th><th>compared</th>"
        f"<th>kept (mean)</th><th>kept (lowest)</th></tr>{families}</table>{images}"
        "</body></html>"
    )
