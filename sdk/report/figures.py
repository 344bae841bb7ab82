"""The report's figures as PNG files; matplotlib (the `report` extra) is imported only here, lazily."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from sdk._constants import REPORT_BREAK_LABELS
from sdk.report.build import Report

TITLES = {
    "ttft": "TTFT against uncached input tokens",
    "hit_ratio": "Cache hit ratio over time per conversation",
    "cost_split": "Spend per model: input, cached input, cache writes and output",
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
        "ttft": _ttft,
        "hit_ratio": _hit_ratio,
        "cost_split": _cost_split,
        "decode": _decode,
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
        axes.plot(
            [0, top],
            [report.fit.intercept_s, report.fit.intercept_s + report.fit.slope_s_per_token * top],
            "k--",
            label=f"prefill {report.fit.seconds_per_1k * 1000:.0f} ms / 1k tokens",
        )
    axes.set_xlabel("uncached input tokens")
    axes.set_ylabel("time to first chunk (s)")
    axes.legend(loc="upper left")


def _hit_ratio(figure: Any, report: Report) -> None:
    """One point per call (a ratio per call, not a continuous quantity); a break is a cross on its point,
    and only the first `REPORT_BREAK_LABELS` get their cause written."""
    axes = figure.add_subplot()
    start = min((call.start_ns for call in report.calls), default=0)
    labels = REPORT_BREAK_LABELS
    for conversation, points in report.hits.items():
        xs = [(p.start_ns - start) / 1e9 for p in points]
        axes.scatter(xs, [p.hit_ratio for p in points], label=conversation, s=28, zorder=2)
        breaks = [(x, p) for x, p in zip(xs, points) if p.cause is not None]
        for x, point in breaks[:labels]:
            axes.annotate(
                point.cause, (x, point.hit_ratio), xytext=(4, 6), textcoords="offset points", rotation=45, fontsize=7
            )
        labels -= min(labels, len(breaks))
    broken = [((p.start_ns - start) / 1e9, p.hit_ratio) for points in report.hits.values() for p in points if p.cause]
    if broken:
        axes.scatter(*zip(*broken), marker="x", s=90, c="black", label="cache break", zorder=3)
    axes.set_xlabel("seconds since the first call")
    axes.set_ylabel("cache hit ratio of the call")
    axes.set_ylim(-0.05, 1.15)
    axes.legend(loc="upper left", bbox_to_anchor=(1, 1), fontsize=8)


_SPEND = (
    ("input_usd", "uncached input"),
    ("cached_input_usd", "cached input"),
    ("cache_write_usd", "cache writes"),
    ("output_usd", "output (decode)"),
)
"""The four kinds of spend, in the order the cost picture draws them."""
_PANELS_PER_ROW = 3


def _cost_split(figure: Any, report: Report) -> None:
    """A panel per model: its four kinds of spend side by side, and output spend over input spend written on it."""
    costs = report.costs
    if not costs:
        figure.add_subplot().text(0.5, 0.5, "no priced calls", ha="center")
        return
    columns = min(len(costs), _PANELS_PER_ROW)
    rows = -(-len(costs) // columns)
    figure.set_size_inches(max(8, 3.6 * columns), 4.5 * rows)
    labels = [label for _, label in _SPEND]
    colours = [f"C{index}" for index in range(len(_SPEND))]
    for index, spend in enumerate(costs):
        axes = figure.add_subplot(rows, columns, index + 1)
        values = [getattr(spend.cost, field) for field, _ in _SPEND]
        bars = axes.bar(range(len(values)), values, color=colours)
        axes.bar_label(bars, labels=[f"${value:.4f}" for value in values], fontsize=7)
        axes.set_xticks(range(len(values)), labels, rotation=30, ha="right", fontsize=8)
        axes.set_title(f"{spend.model} ({spend.calls} calls)", fontsize=9)
        axes.set_ylim(0, max(values, default=0.0) * 1.35 or 1.0)
        ratio = spend.output_to_input
        said = f"output = {ratio:.2g}x input spend" if ratio is not None else "no input spend"
        axes.text(
            0.5,
            0.93,
            f"{said}\ncache reads saved ${spend.cost.saved_usd:.4f}",
            transform=axes.transAxes,
            ha="center",
            va="top",
            fontsize=8,
            bbox={"boxstyle": "round", "facecolor": "white", "alpha": 0.9},
        )
        if index % columns == 0:
            axes.set_ylabel("USD")


def _decode(figure: Any, report: Report) -> None:
    speed, lengths = figure.subplots(1, 2)
    models = [model.model for model in report.decode]
    speed.bar(models, [model.tokens_per_s or 0.0 for model in report.decode])
    speed.set_ylabel("decode tokens/s (median)")
    lengths.boxplot([list(model.output_lengths) or [0] for model in report.decode], tick_labels=models)
    lengths.set_ylabel("output tokens")
    for index, model in enumerate(report.decode):
        if model.draft_acceptance is not None:
            speed.annotate(
                f"{model.draft_acceptance:.0%} of drafts kept",
                (index, model.tokens_per_s or 0.0),
                fontsize=8,
                ha="center",
                va="bottom",
            )
    for index, model in enumerate(report.decode, start=1):
        if model.guard_cuts:
            lengths.annotate(
                f"{model.guard_cuts} cut, {model.guard_tokens_saved} saved",
                (index, max(model.output_lengths)),
                fontsize=8,
                ha="center",
                va="bottom",
            )
