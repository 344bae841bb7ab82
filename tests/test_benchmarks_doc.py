"""docs/benchmarks.md's writer (tests/benchmarks/figures_doc.py): a benchmark's run replaces its own
section and keeps every other one, with the machine it ran on above its table."""

from __future__ import annotations

from pathlib import Path

from tests.benchmarks import figures_doc


def test_a_run_replaces_only_its_own_section_and_keeps_the_others_in_name_order(tmp_path: Path):
    doc = tmp_path / "benchmarks.md"
    doc.write_text(figures_doc.replace_section("", "bench_b", figures_doc.section("bench_b", "b 1.0x", "machine B")))
    figures_doc.record("bench_a", "a table\nrow 2.0x\n", doc)
    figures_doc.record("bench_c", "c 3.0x", doc)
    figures_doc.record("bench_a", "a again 4.0x", doc)
    text = doc.read_text()
    assert text.startswith(figures_doc.TITLE)
    assert [line for line in text.splitlines() if line.startswith("## ")] == ["## bench_a", "## bench_b", "## bench_c"]
    assert "a again 4.0x" in text and "row 2.0x" not in text
    assert "b 1.0x" in text and "machine B" in text and "c 3.0x" in text


def test_each_section_names_the_cpu_its_capability_cores_load_and_commit(tmp_path: Path):
    doc = tmp_path / "benchmarks.md"
    figures_doc.record("bench_x", "x 1.0x", doc)
    machine = doc.read_text().split("## bench_x\n\n", 1)[1].splitlines()[0]
    assert figures_doc.cpu_model() in machine and "torch capability " in machine
    assert "cores; load " in machine and "commit " in machine and "UTC" in machine
