"""The SDK against every wire fault the provider simulator scripts: one table, both clients.

Each fault case runs for Chat Completions and Messages, streamed and not (where the fault applies),
sync and async, and checks four things: how many attempts reached the simulator, the exception the
caller sees (always the client's own, `sdk.StreamTruncated` included), what the caller received (a
completed answer is the whole reply; partial text only ever comes with an error), and what the call
span recorded (`error.type`, `kvwise.attempts`). Waits between attempts are recorded, not slept.
The matrix is printed when the module ends (`pytest -s tests/sdk/test_fault_matrix.py`).
"""

from __future__ import annotations

import email.utils
import enum
import functools
import importlib
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import anthropic
import openai
import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

import sdk
from sdk._constants import RETRY_AFTER_CAP_SECONDS, RETRY_JITTER_SECONDS, RETRY_MAX_DELAY_SECONDS
from sdk.retry import acall_with_retries, call_with_retries
from sdk.telemetry import semconv as sc
from tests.simulator import ProviderSimulator

USER = [{"role": "user", "content": "Tell me something."}]
CUT_AT = 3  # content tokens sent before a mid-stream fault
RETRIES = sdk.Policy().retries
CALL_TIMEOUT = 10.0  # every client has one, so no case can hang
READ_TIMEOUT = 0.5  # the timeout cases' client timeout ...
STALL = 1.5  # ... and how long the simulator stalls: well past it
BACKOFF = (0.0, RETRY_MAX_DELAY_SECONDS + RETRY_JITTER_SECONDS)  # exponential backoff with jitter
DATE_AHEAD = 30.0  # an HTTP-date Retry-After this far ahead (under the cap)


class Got(enum.Enum):
    """What reached the caller."""

    FULL = "the full reply"
    PARTIAL = "partial text, then the error"
    NOTHING = "nothing, then the error"


@dataclass(frozen=True, slots=True)
class Case:
    """One fault and what the SDK must make of it.

    `attempts`: requests the simulator saw (the span's `kvwise.attempts` too, unless `refused`: then
    the simulator sees none and the span counts every try). `raises`: the exception's class name for
    (openai, anthropic), None when the call completes. `waits`: bounds of every wait between attempts.
    """

    name: str
    script: Callable[[ProviderSimulator], None]
    attempts: int
    raises: tuple[str, str] | None = None
    got: Got = Got.FULL
    streams: tuple[bool, ...] = (False, True)
    waits: tuple[float, float] | None = None
    refused: bool = False
    timeout: float = CALL_TIMEOUT

    @property
    def span_attempts(self) -> int:
        return RETRIES + 1 if self.refused else self.attempts


def same(name: str) -> tuple[str, str]:
    """The same exception class name for both clients."""
    return name, name


def fail(status: int, times: int = 1, **headers: str) -> Callable[[ProviderSimulator], None]:
    return lambda sim: sim.fail(status, times=times, headers={k.replace("_", "-"): v for k, v in headers.items()})


def retry_after_date(sim: ProviderSimulator) -> None:
    sim.fail(429, headers={"retry-after": email.utils.formatdate(time.time() + DATE_AHEAD, usegmt=True)})


def cut(mode: str, times: int = 1) -> Callable[[ProviderSimulator], None]:
    return lambda sim: sim.cut_stream_after(CUT_AT, mode=mode, times=times)  # type: ignore[arg-type]


def nothing(sim: ProviderSimulator) -> None:
    """No fault scripted: the case's fault is outside the simulator."""


TRUNCATED = same("StreamTruncated")
CASES = [
    Case("429, retry-after: 1 (seconds)", fail(429, retry_after="1"), 2, waits=(1.0, 1.0)),
    Case("429, retry-after: HTTP date", retry_after_date, 2, waits=(DATE_AHEAD - 10, DATE_AHEAD)),
    Case("429, retry-after-ms: 5", fail(429, retry_after_ms="5"), 2, waits=(0.005, 0.005)),
    Case("429, retry-after over the cap", fail(429, retry_after=str(int(RETRY_AFTER_CAP_SECONDS * 10))), 2, waits=BACKOFF),
    Case("429 without retry-after, every attempt", fail(429, times=RETRIES + 1), RETRIES + 1, same("RateLimitError"), Got.NOTHING, waits=BACKOFF),
    Case("500, every attempt", fail(500, times=RETRIES + 1), RETRIES + 1, same("InternalServerError"), Got.NOTHING, waits=BACKOFF),
    Case("502 once", fail(502, retry_after_ms="5"), 2),
    Case("503 once", fail(503, retry_after_ms="5"), 2),
    Case("529, every attempt", fail(529, times=RETRIES + 1, retry_after_ms="5"), RETRIES + 1, ("InternalServerError", "OverloadedError"), Got.NOTHING),
    Case("connection refused", nothing, 0, same("APIConnectionError"), Got.NOTHING, waits=BACKOFF, refused=True),
    Case("reset before the first byte", lambda sim: sim.fail(reset=True), 2),
    Case("reset mid-stream", cut("reset"), 1, TRUNCATED, Got.PARTIAL, streams=(True,)),
    Case("drop mid-stream", cut("drop"), 1, TRUNCATED, Got.PARTIAL, streams=(True,)),
    Case("clean end without the final event", cut("end"), 1, TRUNCATED, Got.PARTIAL, streams=(True,)),
    Case("reset mid-body", cut("reset"), 2, streams=(False,)),
    Case("drop mid-body", cut("drop"), 2, streams=(False,)),
    Case("200 with a truncated JSON body, once", cut("end"), 2, streams=(False,)),
    Case("200 with a truncated JSON body, every attempt", cut("end", times=RETRIES + 1), RETRIES + 1, same("APIConnectionError"), Got.NOTHING, streams=(False,), waits=BACKOFF),
    Case("read timeout before the first chunk", lambda sim: sim.stall(STALL), 2, timeout=READ_TIMEOUT),
    Case("read timeout between chunks", lambda sim: sim.stall(STALL, at_token=CUT_AT), 1, TRUNCATED, Got.PARTIAL, streams=(True,), timeout=READ_TIMEOUT),
    Case("bad JSON in a data: line before any content", lambda sim: sim.inject_event("bad_json"), 2, streams=(True,)),
    Case("bad JSON in a data: line mid-stream", lambda sim: sim.inject_event("bad_json", at_token=CUT_AT), 1, TRUNCATED, Got.PARTIAL, streams=(True,)),
    Case("unknown event type", lambda sim: sim.inject_event("unknown", at_token=CUT_AT), 1, streams=(True,)),
    Case("error event mid-stream", lambda sim: sim.inject_event("error", at_token=CUT_AT), 1, ("APIError", "APIStatusError"), Got.PARTIAL, streams=(True,)),
]


@dataclass(frozen=True, slots=True)
class ApiUnderTest:
    """How to call one API and read its answers, whole or streamed."""

    name: str
    create: Callable[[Any, bool], Any]
    text: Callable[[Any], str]
    event_text: Callable[[Any], str]
    is_final: Callable[[Any], bool]


def _chat_event_text(event: Any) -> str:
    return (event.choices[0].delta.content or "") if event.choices else ""


def _messages_event_text(event: Any) -> str:
    return event.delta.text if event.type == "content_block_delta" else ""


APIS = {
    "chat": ApiUnderTest(
        "openai chat",
        lambda client, stream: client.chat.completions.create(model="m", messages=USER, stream=stream),
        lambda response: response.choices[0].message.content,
        _chat_event_text,
        lambda event: bool(event.choices) and event.choices[0].finish_reason is not None,
    ),
    "messages": ApiUnderTest(
        "anthropic messages",
        lambda client, stream: client.messages.create(model="claude-opus-4-1", messages=USER, stream=stream),
        lambda response: response.content[0].text,
        _messages_event_text,
        lambda event: event.type == "message_stop",
    ),
}


@dataclass(frozen=True, slots=True)
class Observed:
    """What one run of a case showed: a row of the printed matrix."""

    attempts: int
    exception: str
    got: str
    error_type: str
    span_attempts: int


@dataclass(slots=True)
class Answer:
    """What the caller received: text, whether the answer completed, and the exception, if any."""

    text: str = ""
    completed: bool = False
    error: BaseException | None = None


@pytest.fixture(scope="module")
def matrix() -> Iterator[dict[tuple[str, str, bool], list[tuple[Observed, list[float]]]]]:
    """Rows collected by every run; printed as one table when the module ends."""
    rows: dict[tuple[str, str, bool], list[tuple[Observed, list[float]]]] = {}
    yield rows
    print("\n" + render(rows))


def render(rows: dict[tuple[str, str, bool], list[tuple[Observed, list[float]]]]) -> str:
    """A Markdown table: one line per case, API and streaming; sync and async merged when they agree."""
    lines = [
        "| fault | API | streamed | attempts | caller sees | caller got | span error.type | kvwise.attempts | waits (s) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    order = {case.name: index for index, case in enumerate(CASES)}
    for (case, api, streamed), runs in sorted(rows.items(), key=lambda item: (order[item[0][0]], item[0][1], item[0][2])):
        waits = [wait for _, run_waits in runs for wait in run_waits]
        span = "-" if not waits else f"{min(waits):.3g}" if min(waits) == max(waits) else f"{min(waits):.2g}–{max(waits):.2g}"
        for seen in dict.fromkeys(observed for observed, _ in runs):
            cells = [case, APIS[api].name, "yes" if streamed else "no", str(seen.attempts), seen.exception, seen.got,
                     seen.error_type, str(seen.span_attempts), span]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


@pytest.fixture
def spans() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def waits(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Every wait the retries ask for, recorded instead of slept."""
    asked: list[float] = []

    async def asleep(seconds: float) -> None:
        asked.append(seconds)

    wrap_module = importlib.import_module("sdk.wrap")  # `sdk.wrap` is the function
    monkeypatch.setattr(wrap_module, "call_with_retries", functools.partial(call_with_retries, sleep=asked.append))
    monkeypatch.setattr(wrap_module, "acall_with_retries", functools.partial(acall_with_retries, sleep=asleep))
    return asked


@pytest.fixture
def refused_url() -> Iterator[str]:
    """A loopback address whose port is bound but never listens: every connection is refused."""
    with socket.socket() as bound:
        bound.bind(("127.0.0.1", 0))
        yield f"http://127.0.0.1:{bound.getsockname()[1]}"


async def call(api: ApiUnderTest, client: Any, stream: bool) -> Answer:
    """Make the call as an application would and note what it received, up to any exception."""
    answer = Answer()
    try:
        result = await resolve(api.create(client, stream))
        if not stream:
            answer.text, answer.completed = api.text(result), True
            return answer
        async for event in events_of(result):
            answer.text += api.event_text(event)
            answer.completed = answer.completed or api.is_final(event)
    except Exception as error:  # noqa: BLE001 - what the caller sees is the subject of the test
        answer.error = error
    return answer


async def resolve(value: Any) -> Any:
    return await value if hasattr(value, "__await__") else value


async def events_of(stream: Any) -> Any:
    if hasattr(stream, "__aiter__"):
        async for event in stream:
            yield event
    else:
        for event in stream:
            yield event


def call_span(exporter: InMemorySpanExporter) -> ReadableSpan:
    [span] = [span for span in exporter.get_finished_spans() if span.parent is None]
    return span


@pytest.mark.parametrize("api_name", list(APIS))
@pytest.mark.parametrize(
    ("case", "stream"),
    [(case, stream) for case in CASES for stream in case.streams],
    ids=[f"{case.name}-{'streamed' if stream else 'whole'}" for case in CASES for stream in case.streams],
)
async def test_each_wire_fault_ends_in_the_full_reply_or_the_clients_own_error(
    case: Case, stream: bool, api_name: str, mode: str, simulator: ProviderSimulator,
    request: pytest.FixtureRequest, spans: InMemorySpanExporter, waits: list[float],
    refused_url: str, matrix: dict[tuple[str, str, bool], list[tuple[Observed, list[float]]]],
) -> None:
    api = APIS[api_name]
    native = request.getfixturevalue("openai_client" if api_name == "chat" else "anthropic_client")
    client_module = openai if api_name == "chat" else anthropic
    options: dict[str, Any] = {"timeout": case.timeout}
    if case.refused:
        options["base_url"] = refused_url + ("/v1" if api_name == "chat" else "")
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    client = sdk.wrap(native.with_options(**options), tracer_provider=provider)
    case.script(simulator)

    answer = await call(api, client, stream)

    span = call_span(spans)
    attributes = span.attributes or {}
    exception = type(answer.error).__name__ if answer.error is not None else "-"
    got = Got.FULL if answer.completed and answer.error is None else Got.PARTIAL if answer.text else Got.NOTHING
    observed = Observed(len(simulator.requests), exception, got.value, str(attributes.get(sc.ERROR_TYPE, "-")),
                        int(attributes.get(sc.KVWISE_ATTEMPTS, 0)))
    matrix.setdefault((case.name, api_name, stream), []).append((observed, list(waits)))

    expected_error = case.raises[api_name == "messages"] if case.raises else None
    assert (observed.attempts, observed.span_attempts) == (case.attempts, case.span_attempts)
    assert got is case.got
    if expected_error is None:
        assert answer.error is None and answer.text == simulator.reply
        assert span.status.status_code is not StatusCode.ERROR and sc.ERROR_TYPE not in attributes
    else:
        assert exception == expected_error and isinstance(answer.error, client_module.APIError)
        assert answer.text == simulator.reply[: len(answer.text)] and answer.text != simulator.reply
        assert span.status.status_code is StatusCode.ERROR
        assert attributes[sc.ERROR_TYPE] == ("stream_truncated" if expected_error == "StreamTruncated" else expected_error)
    if case.waits is not None:
        low, high = case.waits
        assert len(waits) == case.span_attempts - 1 and all(low <= wait <= high for wait in waits)
