"""Only `sdk/telemetry/` writes spans (issue 56): the rest of `sdk` leaves what it learns as data.

A step, the send or a feature records what it decided or measured on the call (`Decisions`, the
`CallEnd`, `CallRecord.attempt`/`waited`), and the telemetry writes it onto the span. Read from the
source, nothing executed: any use of a span writer's name (`span.set_attribute(...)`, or the bound
method taken for later) outside `sdk/telemetry/` fails, whatever it is called on.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TELEMETRY = ROOT / "sdk" / "telemetry"
SPAN_WRITERS = frozenset({"set_attribute", "set_attributes", "add_event", "set_status", "record_exception"})
"""OpenTelemetry's `Span` methods that write a span (its attributes, events, status), but `end`."""


def span_writes(source: str) -> list[tuple[int, str]]:
    """(line, name) of every use of a span writer's name in `source`, as an attribute of anything."""
    return sorted(
        (node.lineno, node.attr)
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Attribute) and node.attr in SPAN_WRITERS
    )


def test_span_writes_finds_calls_and_bound_methods_and_nothing_else():
    toy = (
        '"""A docstring naming span.set_attribute is no write."""\n'
        "def note(span, record):\n"
        "    span.set_attribute('a', 1)\n"
        "    record.span.set_attributes({'b': 2})\n"
        "    write = span.add_event\n"
        "    span.set_status(None); span.record_exception(ValueError())\n"
        "    span.end(); span.is_recording(); record.attempt(2)\n"
        "    return {'set_attribute': write}\n"
    )
    assert span_writes(toy) == [
        (3, "set_attribute"),
        (4, "set_attributes"),
        (5, "add_event"),
        (6, "record_exception"),
        (6, "set_status"),
    ]
    assert span_writes("def clean(span):\n    span.end()\n") == []


def test_only_the_telemetry_writes_spans():
    found = [
        f"{path.relative_to(ROOT)}:{line}: {name}"
        for path in sorted((ROOT / "sdk").rglob("*.py"))
        if not path.is_relative_to(TELEMETRY)
        for line, name in span_writes(path.read_text())
    ]
    assert not found, f"span writes outside sdk/telemetry/ (make them data the telemetry writes): {found}"
