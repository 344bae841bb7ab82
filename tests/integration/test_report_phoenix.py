"""`kvwise report --phoenix`: the report read back from a real Phoenix's REST API is the report of the spans sent."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from sdk import report
from sdk.report.phoenix import PAGE_SIZE, PhoenixError
from tests.integration.conftest import CALLS, PROJECT, Traced

REPORT_TIMEOUT_S = 120


def test_the_calls_read_from_phoenix_are_the_calls_sent_with_the_same_numbers(traced: Traced) -> None:
    sent = report.calls(report.from_readable(traced.sent.values()))
    stored = report.calls(report.read_phoenix(traced.phoenix.url, PROJECT))
    assert len(sent) == len(CALLS)
    assert len(stored) == len(sent)
    for a, b in zip(sent, stored, strict=True):
        # Phoenix keeps times to the microsecond; every other fact arrives as it was sent.
        assert abs(a.start_ns - b.start_ns) < 1_000
        assert (a.ttft_s is None) == (b.ttft_s is None)
        assert (a.decode_s is None) == (b.decode_s is None)
        if a.decode_s is not None and b.decode_s is not None:
            assert b.decode_s == pytest.approx(a.decode_s, abs=1e-5)
        exact = (
            "model",
            "conversation",
            "input_tokens",
            "output_tokens",
            "cache_read_tokens",
            "cost",
            "fingerprint",
            "break_cause",
            "guard",
            "guard_tokens_saved",
        )
        assert {key: getattr(b, key) for key in exact} == {key: getattr(a, key) for key in exact}
    assert any(call.cache_read_tokens > 0 for call in stored)  # the second call's hit survived the round trip
    assert any(call.guard for call in stored)  # so did the loop guard's cut
    assert report.summary(report.build(stored)) == report.summary(report.build(sent))


def test_pages_are_followed_until_phoenix_has_no_more(traced: Traced, monkeypatch: pytest.MonkeyPatch) -> None:
    pages: list[int] = []
    monkeypatch.setattr("sdk.report.phoenix.PAGE_SIZE", 2)
    spans = report.read_phoenix(traced.phoenix.url, PROJECT, lambda done, total: pages.append(done))
    assert len(spans) == len(traced.sent) and PAGE_SIZE > len(traced.sent)
    assert pages == list(range(2, len(spans) + 1, 2)) + ([len(spans)] if len(spans) % 2 else [])
    assert {span.span_id for span in spans} == set(traced.sent)


def test_an_unknown_project_or_an_unreachable_phoenix_is_a_clear_error(traced: Traced) -> None:
    with pytest.raises(PhoenixError, match="no project 'no-such-project'"):
        report.read_phoenix(traced.phoenix.url, "no-such-project")
    with pytest.raises(PhoenixError, match="could not read spans"):
        report.read_phoenix("http://127.0.0.1:9", PROJECT)


def test_the_cli_writes_the_page_from_phoenix(traced: Traced, tmp_path: Path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "sdk.report",
            "--phoenix",
            traced.phoenix.url,
            "--project",
            PROJECT,
            "--out",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=REPORT_TIMEOUT_S,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"{len(CALLS)} calls, $")
    assert (tmp_path / "report.html").read_text().startswith("<!doctype html>")
    missing = subprocess.run(
        [sys.executable, "-m", "sdk.report", "--phoenix", traced.phoenix.url, "--project", "nope"],
        capture_output=True,
        text=True,
        timeout=REPORT_TIMEOUT_S,
    )
    assert missing.returncode == 2 and "no project 'nope'" in missing.stderr and "Traceback" not in missing.stderr
