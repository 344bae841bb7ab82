"""What kvwise keeps of a prompt family's stable prefix, told three ways (issue 52, item 7): on each
call's span (`kvwise.prompt.family`, `kvwise.prompt.stable_kept`), per family in `kvwise report`,
and by `sdk.lint`, which names a changing line its family has shown, from the store's memory.

Real `openai` clients against the simulator, a real SQLite store file, real OpenTelemetry spans.
"""

from __future__ import annotations

from typing import Any

import openai
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import sdk
from sdk import semconv as sc
from sdk.prompt.lint import FindingCode
from sdk.report import build, calls, from_readable, summary
from sdk.report.page import render

HEAD = "You are the release assistant of the payments team.\n"
RULES = "".join(f"{n}. Never ship a migration without its rollback script, rule {n}.\n" for n in range(1, 30))
TAIL = "Answer in English, in three sentences at most."


def _system(directory: str) -> str:
    """A CLI agent's prompt: a working-directory line no shape rule knows, then its stable rules."""
    return f"{HEAD}Working directory: {directory}\n{RULES}{TAIL}"


def _kwargs(system: str, user: bool = True) -> dict[str, Any]:
    messages = [{"role": "system", "content": system}] + ([{"role": "user", "content": "Ship it?"}] if user else [])
    return {"model": "gpt-5.4", "max_tokens": 16, "messages": messages}


@pytest.fixture
def state(tmp_path) -> str:
    return f"sqlite:///{tmp_path / 'state.sqlite3'}"


def _wrapped_calls(simulator: Any, state: str, directories: list[str]) -> list[dict[str, Any]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    bare = openai.OpenAI(base_url=simulator.openai_base_url, api_key="test-key", max_retries=0)
    client = sdk.wrap(bare, tracer_provider=provider, state=state)
    for directory in directories:
        client.chat.completions.create(**_kwargs(_system(directory)))
    return exporter.get_finished_spans()  # type: ignore[no-any-return]


def _kept(spans: list[Any]) -> list[float | None]:
    return [
        span.attributes.get(sc.KVWISE_PROMPT_STABLE_KEPT) for span in spans if sc.KVWISE_ATTEMPTS in span.attributes
    ]


def test_each_span_says_its_family_and_the_stable_prefix_it_kept(simulator, state):
    spans = [
        s
        for s in _wrapped_calls(simulator, state, ["/home/ana/api", "/home/ben/web", "/home/cy/cli"])
        if sc.KVWISE_ATTEMPTS in s.attributes
    ]
    families = {span.attributes[sc.KVWISE_PROMPT_FAMILY] for span in spans}
    assert len(spans) == 3 and len(families) == 1
    first, learning, learnt = _kept(spans)
    stable = len(_system("x").encode()) - len("Working directory: x\n")
    assert first is None  # the family's first call: nothing to keep
    assert learning == pytest.approx(len(HEAD) / stable)  # the line moved on this call: the prefix broke at it
    assert learnt == 1.0  # moved on both calls: the whole stable prefix kept
    assert "Working directory" not in simulator.requests[-1].body["messages"][0]["content"]


def test_kvwise_report_shows_per_family_the_stable_prefix_kept(simulator, state):
    spans = _wrapped_calls(simulator, state, ["/home/ana/api", "/home/ben/web", "/home/cy/cli", "/home/di/app"])
    report = build(calls(from_readable(spans)))
    [row] = report.families
    kept = [share for share in _kept(spans) if share is not None]
    assert (row.calls, row.compared) == (4, 3)
    assert row.kept_mean == pytest.approx(sum(kept) / 3) and row.kept_lowest == min(kept) < 1.0
    assert f"family {row.family}: 4 calls, {row.kept_mean:.1%} of the stable prefix kept" in summary(report)
    page = render(report, {})  # the page's table, without figures
    assert (
        f"<tr><td>{row.family}</td><td>4</td><td>3</td><td>{row.kept_mean:.1%}</td><td>{row.kept_lowest:.1%}</td></tr>"
        in page
    )


def test_lint_names_a_changing_line_the_family_has_shown(simulator, state):
    bare = openai.OpenAI(base_url=simulator.openai_base_url, api_key="test-key", max_retries=0)
    call = _kwargs(_system("/home/eve/ops"))
    codes = [finding.code for finding in sdk.lint(call, "openai", client=bare, state=state)]
    assert FindingCode.CHANGING_LINE not in codes  # nothing learnt yet: nothing to name
    _wrapped_calls(simulator, state, ["/home/ana/api", "/home/ben/web"])
    [found] = [f for f in sdk.lint(call, "openai", client=bare, state=state) if f.code is FindingCode.CHANGING_LINE]
    assert found.where == "system[0]" and "'Working directory: /home/eve/ops'" in found.message
    assert f"from byte {len(HEAD)}" in found.message and "sdk.wrap moves it" in found.message
    [alone] = [
        f
        for f in sdk.lint(_kwargs(_system("/home/eve/ops"), user=False), "openai", client=bare, state=state)
        if f.code is FindingCode.CHANGING_LINE
    ]
    assert "cannot move it" in alone.message  # no user turn to carry the note
    assert not [f for f in sdk.lint(call, "openai") if f.code is FindingCode.CHANGING_LINE]  # no client: no memory read
