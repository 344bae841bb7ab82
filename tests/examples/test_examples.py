"""Every example and the demo's code path, against the real local server with the bundled model."""

from __future__ import annotations

from collections.abc import Iterator

import jsonschema
import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from examples import (
    anthropic_breakpoints,
    async_stream_loop_guard,
    demo,
    other_servers,
    otlp_export,
    prompt_builder,
    wrap_openai,
)
from examples.local_server import local_server
from training import tool_corpus


@pytest.fixture(scope="module")
def base_url() -> Iterator[str]:
    with local_server() as url:
        yield url


@pytest.fixture(scope="module")
def chat_url() -> Iterator[str]:
    """The demo's real model, SmolLM2-135M-Instruct, served from its GGUF file."""
    with local_server(demo.MODEL) as url:
        yield url


def test_wrap_openai_answers_in_text(base_url):
    assert wrap_openai.main(base_url).strip()


def test_anthropic_breakpoints_read_the_cache_on_the_second_call(base_url):
    first, second = anthropic_breakpoints.main(base_url)
    assert second > first


def test_async_stream_loop_guard_cuts_the_looping_prompt(base_url):
    text, finish = async_stream_loop_guard.main(base_url)
    assert finish == "length"
    assert text


def test_prompt_builder_renders_for_both_apis(base_url):
    openai_text, anthropic_text = prompt_builder.main(base_url)
    assert openai_text.strip() and anthropic_text.strip()


def test_other_servers_example_sees_the_prefix_cache_hit(base_url):
    first, second = other_servers.main(base_url)
    assert second > 0


def test_otlp_example_exports_the_call_span(base_url):
    exporter = InMemorySpanExporter()
    otlp_export.main(base_url, exporter=exporter)
    names = [span.name for span in exporter.get_finished_spans()]
    assert "chat default" in names and "prefill" in names and "decode" in names


def test_demo_shows_cache_hits_loop_cuts_and_span_rows(chat_url, base_url, tmp_path):
    lines: list[str] = []
    result = demo.run_demo(chat_url, base_url, out=lines.append, report_dir=tmp_path)
    unwrapped_cached = [plain.cached_tokens for plain, _ in result["cache"]]
    wrapped_cached = [guarded.cached_tokens for _, guarded in result["cache"]]
    assert unwrapped_cached == [0, 0, 0]
    assert (
        wrapped_cached[0] == 0 and min(wrapped_cached[1:]) > 0
    )  # the IDs move on first sight: call 2 reads call 1's prefix
    for plain, guarded in result["loops"].values():
        assert guarded < plain
    tool = result["tool"]
    assert tool["name"] == demo.WEATHER_TOOL["function"]["name"], tool
    jsonschema.validate(tool["arguments"], demo.WEATHER_TOOL["function"]["parameters"])
    assert tool["arguments"] == {"city": "Paris"}
    assert tool["result"] == demo.get_weather("Paris")
    assert tool["result"]["conditions"] in tool["answer"], tool["answer"]
    framework = result["framework"]  # (f): openai-agents ran the same loop on a client wrapped with sdk.Policy()
    assert framework["calls"] == 2 and framework["cached"][1] > 0, framework
    assert demo.get_weather("Paris")["conditions"] in framework["answer"], framework["answer"]
    completed = [row for row in result["spans"] if row["guard"] != "loop"]
    assert len(completed) == 5 and all(row["input"] > 0 and row["output"] > 0 for row in completed)
    assert [row["cached"] for row in completed][1:3] == wrapped_cached[1:]
    assert sum(row["guard"] == "loop" for row in result["spans"]) == 2
    assert any("(c) A tool loop" in line for line in lines) and any("(d)" in line for line in lines)
    page = result["report"].read_text()
    assert result["report"].parent == tmp_path and "<img" in page and str(result["report"]) in lines[-1]
    _assert_printed_figures_are_the_results(lines, result)


def _section(printed: list[str], letter: str) -> list[str]:
    """The lines of the demo's section `(letter)`, its heading first."""
    text = "\n".join(printed).splitlines()
    start = next(i for i, line in enumerate(text) if line.startswith(f"({letter})"))
    end = next((i for i in range(start + 1, len(text)) if text[i].startswith("(")), len(text))
    return [line for line in text[start:end] if line.strip()]


def _assert_printed_figures_are_the_results(printed: list[str], result: dict) -> None:
    """What the demo prints is what it measured, and the figures agree with each other."""
    cache_rows = [line.split() for line in _section(printed, "a")[2:]]
    assert [int(row[0]) for row in cache_rows] == [1, 2, 3]
    assert [(int(row[2]), int(row[4])) for row in cache_rows] == [
        (plain.cached_tokens, wrapped.cached_tokens) for plain, wrapped in result["cache"]
    ]
    loop_rows = _section(printed, "b")[2:]
    assert len(loop_rows) == len(result["loops"])
    for row, (plain, wrapped) in zip(loop_rows, result["loops"].values()):
        assert [int(cell) for cell in row.split() if cell.isdigit()][:2] == [plain, wrapped]
    span_rows = [line.split() for line in _section(printed, "d")[2:]]
    assert len(span_rows) == len(result["spans"])
    for cells, row in zip(span_rows, result["spans"]):
        tokens_in, cached, tokens_out = int(cells[2]), int(cells[3]), int(cells[4])
        assert (tokens_in, cached, tokens_out) == (row["input"], row["cached"], row["output"])
        assert (
            0 <= cached <= tokens_in and float(cells[7]) > 0
        )  # a cached read never exceeds the prompt; every call costs
        assert (cells[-1] == "loop") == (row["guard"] == "loop")
    framework = _section(printed, "f")[1]
    assert f"{result['framework']['calls']} model calls" in framework
    assert f"cached tokens per call {list(result['framework']['cached'])}" in framework


def test_demo_offers_tools_the_bundled_model_was_trained_on():
    assert demo.TOOLS == [tool_corpus.WEATHER_TOOL.as_openai()]
    assert set(demo.WEATHER.values()) <= set(tool_corpus.CONDITIONS) and set(demo.WEATHER) <= set(tool_corpus.CITIES)
