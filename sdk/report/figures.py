"""The report's figures as PNG files; matplotlib (the `report` extra) is imported only here, lazily."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from sdk._constants import REPORT_BREAK_LABELS
from sdk.report.build import Report

TITLES = {
    "ttft": "TTFT against uncached input tokens",
    "hit_ratio": "Cache hit ratio over time per prompt family",
    "cost_split": "Cost split per model",
    "decode": "Decode speed and output lengths per model",
}
"""Each figure's file stem and title."""


def write_figures(report: Report, folder: Path) -> dict[str, Path]:
    """Write every figure as `<folder>/<stem>.png`; return the paths by stem."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    folder.mkdir(parents=True, exist_ok=True)
    drawers: dict[str, Callable[[Any, Report], None]] = {
        "ttft": _ttft, "hit_ratio": _hit_ratio, "cost_split": _cost_split, "decode": _decode,
    }
    paths = {}
    for stem, draw in drawers.items():
        figure = pyplot.figure(figsize=(8, 4.5))
        draw(figure, report)
        figure.suptitle(TITLES[stem])
        paths[stem] = folder / f"{stem}.png"
        figure.savefig(paths[stem], dpi=100, metadata={"Title": TITLES[stem]}, bbox_inches="tight")
        pyplot.close(figure)
    return paths


def _ttft(figure: Any, report: Report) -> None:
    axes = figure.add_subplot()
    timed = [call for call in report.calls if call.ttft_s is not None]
    for cached, colour, label in ((False, "tab:red", "no cache read"), (True, "tab:blue", "cache read")):
        group = [call for call in timed if (call.cache_read_tokens > 0) == cached]
        axes.scatter([c.uncached_input_tokens for c in group], [c.ttft_s for c in group], c=colour, label=label)
    if report.fit is not None and timed:
        top = max(call.uncached_input_tokens for call in timed)
        axes.plot([0, top], [report.fit.intercept_s, report.fit.intercept_s + report.fit.slope_s_per_token * top],
                  "k--", label=f"prefill {report.fit.seconds_per_1k * 1000:.0f} ms / 1k tokens")
    axes.set_xlabel("uncached input tokens")
    axes.set_ylabel("time to first chunk (s)")
    axes.legend(loc="upper left")


def _hit_ratio(figure: Any, report: Report) -> None:
    """Breaks are one marker set per family; only the first `REPORT_BREAK_LABELS` get their cause written."""
    axes = figure.add_subplot()
    start = min((call.start_ns for call in report.calls), default=0)
    labels = REPORT_BREAK_LABELS
    for family, points in report.hits.items():
        xs = [(p.start_ns - start) / 1e9 for p in points]
        line = axes.plot(xs, [p.hit_ratio for p in points], label=family)[0]
        breaks = [(x, p) for x, p in zip(xs, points) if p.cause is not None]
        axes.scatter([x for x, _ in breaks], [p.hit_ratio for _, p in breaks], marker="v", color=line.get_color())
        for x, point in breaks[:labels]:
            axes.annotate(point.cause, (x, point.hit_ratio), rotation=60, fontsize=7)
        labels -= min(labels, len(breaks))
    axes.set_xlabel("seconds since the first call")
    axes.set_ylabel("cache hit ratio (breaks marked)")
    axes.set_ylim(-0.05, 1.05)
    axes.legend(loc="upper left", bbox_to_anchor=(1, 1), fontsize=8)


def _cost_split(figure: Any, report: Report) -> None:
    axes = figure.add_subplot()
    models = [spend.model for spend in report.costs]
    bottom = [0.0] * len(models)
    for field, label in (("input_usd", "uncached input"), ("cached_input_usd", "cached input"),
                         ("cache_write_usd", "cache writes"), ("output_usd", "output (decode)")):
        values = [getattr(spend.cost, field) for spend in report.costs]
        axes.bar(models, values, bottom=bottom, label=label)
        bottom = [b + v for b, v in zip(bottom, values)]
    for index, spend in enumerate(report.costs):
        axes.annotate(f"saved ${spend.cost.saved_usd:.4f}\ndecode {spend.decode_share:.0%}", (index, bottom[index]),
                      ha="center", va="bottom", fontsize=8)
    axes.set_ylim(0, max(bottom, default=0.0) * 1.25 or 1.0)
    axes.set_ylabel("USD")
    axes.legend(loc="upper left", bbox_to_anchor=(1, 1), fontsize=8)


def _decode(figure: Any, report: Report) -> None:
    speed, lengths = figure.subplots(1, 2)
    models = [model.model for model in report.decode]
    speed.bar(models, [model.tokens_per_s or 0.0 for model in report.decode])
    speed.set_ylabel("decode tokens/s (median)")
    lengths.boxplot([list(model.output_lengths) or [0] for model in report.decode], tick_labels=models)
    lengths.set_ylabel("output tokens")
    for index, model in enumerate(report.decode, start=1):
        if model.guard_cuts:
            lengths.annotate(f"{model.guard_cuts} cut, {model.guard_tokens_saved} saved",
                             (index, max(model.output_lengths)), fontsize=8, ha="center", va="bottom")
