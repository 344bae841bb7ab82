"""A wrapped stream ends and breaks as the bare client's (issue 51): every event reaches the caller
as it arrives, headers included; an end the bare client accepts is an end, marked by the server or
not (the span says which); a broken stream raises the bare client's error class, chained to the
transport error the bare client chains. Real clients over loopback: a scripted SSE server where the
order of events matters, the provider simulator for breaks."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import anthropic
import openai
import pytest
from opentelemetry.trace import StatusCode

import sdk
from sdk import semconv as sc
from sdk.call import Usage
from sdk.lifecycle import CallEnd, Ending
from tests.sdk.helpers import http_library, resolve
from tests.sdk.send.test_fault_matrix import events_of
from tests.sdk.telemetry.test_telemetry_spans import Otel, otel  # noqa: F401

USER = [{"role": "user", "content": "Say hi."}]
CLAUDE = "claude-sonnet-4-6"
READ_TIMEOUT_SECONDS, STALL_SECONDS = 0.5, 2.0  # a read timeout the simulator's stall trips
HOLD_SECONDS = 30.0  # the longest the server waits for its release: a bound against a hung test, never reached


def sse(data: Any, event: str | None = None) -> bytes:
    """One server-sent event (`data` JSON, or a literal string such as `[DONE]`)."""
    head = f"event: {event}\n" if event else ""
    body = data if isinstance(data, str) else json.dumps(data)
    return f"{head}data: {body}\n\n".encode()


def _chunk(delta: dict[str, Any], finish_reason: str | None = None) -> bytes:
    return sse(
        {
            "id": "chatcmpl-1",
            "object": "chat.completion.chunk",
            "created": 1,
            "model": "m",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
        }
    )


def _message_event(kind: str, **fields: Any) -> bytes:
    return sse({"type": kind, **fields}, event=kind)


_RESPONSE = {
    "id": "resp_1",
    "object": "response",
    "created_at": 1,
    "model": "gpt-5.4",
    "output": [],
    "parallel_tool_calls": True,
    "tool_choice": "auto",
    "tools": [],
}
_MESSAGE = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "model": CLAUDE,
    "content": [],
    "stop_reason": None,
    "stop_sequence": None,
    "usage": {"input_tokens": 5, "output_tokens": 1},
}


@dataclass(frozen=True, slots=True)
class Script:
    """A stream as the server sends it: `head` (the header event), then, once released, `rest`."""

    client: Callable[[str, str], Any]  # (mode, base URL) -> the bare client
    create: Callable[[Any], Any]
    head: bytes
    rest: bytes
    is_header: Callable[[Any], bool]


def _openai(mode: str, url: str) -> Any:
    return (openai.OpenAI if mode == "sync" else openai.AsyncOpenAI)(base_url=url + "/v1", api_key="k", max_retries=0)


def _anthropic(mode: str, url: str) -> Any:
    cls = anthropic.Anthropic if mode == "sync" else anthropic.AsyncAnthropic
    return cls(base_url=url, api_key="k", max_retries=0)


CHAT_HEAD = _chunk({"role": "assistant"})
SCRIPTS = {
    "chat role chunk": Script(
        _openai,
        lambda c: c.chat.completions.create(model="m", messages=USER, stream=True),
        CHAT_HEAD,
        _chunk({"content": "Hi"}) + _chunk({}, "stop") + sse("[DONE]"),
        lambda e: e.choices[0].delta.role == "assistant",
    ),
    "messages message_start": Script(
        _anthropic,
        lambda c: c.messages.create(model=CLAUDE, max_tokens=64, messages=USER, stream=True),
        _message_event("message_start", message=_MESSAGE),
        _message_event("content_block_start", index=0, content_block={"type": "text", "text": ""})
        + _message_event("content_block_delta", index=0, delta={"type": "text_delta", "text": "Hi"})
        + _message_event("content_block_stop", index=0)
        + _message_event(
            "message_delta", delta={"stop_reason": "end_turn", "stop_sequence": None}, usage={"output_tokens": 2}
        )
        + _message_event("message_stop"),
        lambda e: e.type == "message_start",
    ),
    "responses response.created": Script(
        _openai,
        lambda c: c.responses.create(model="gpt-5.4", input="Say hi.", stream=True),
        sse(
            {"type": "response.created", "sequence_number": 0, "response": {**_RESPONSE, "status": "in_progress"}},
            event="response.created",
        ),
        sse(
            {
                "type": "response.output_text.delta",
                "sequence_number": 1,
                "item_id": "msg_1",
                "output_index": 0,
                "content_index": 0,
                "delta": "Hi",
                "logprobs": [],
            },
            event="response.output_text.delta",
        )
        + sse(
            {
                "type": "response.completed",
                "sequence_number": 2,
                "response": {
                    **_RESPONSE,
                    "status": "completed",
                    "usage": {
                        "input_tokens": 5,
                        "output_tokens": 1,
                        "total_tokens": 6,
                        "input_tokens_details": {"cached_tokens": 0},
                        "output_tokens_details": {"reasoning_tokens": 0},
                    },
                },
            },
            event="response.completed",
        ),
        lambda e: e.type == "response.created",
    ),
}


class ScriptedServer(ThreadingHTTPServer):
    """Answers every POST with `head`, then, once `release` is set, `rest`; the body ends at the close."""

    daemon_threads = True

    def __init__(self, head: bytes, rest: bytes) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.head, self.rest = head, rest
        self.release = threading.Event()
        self.rest_sent = threading.Event()  # set just before `rest` goes out

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(BaseHTTPRequestHandler):
    server: ScriptedServer

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length") or 0))
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("connection", "close")
        self.end_headers()
        self.wfile.write(self.server.head)
        self.wfile.flush()
        self.server.release.wait(HOLD_SECONDS)
        self.server.rest_sent.set()
        self.wfile.write(self.server.rest)
        self.wfile.flush()

    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextmanager
def _serving(head: bytes, rest: bytes) -> Iterator[ScriptedServer]:
    server = ScriptedServer(head, rest)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.release.set()
        server.shutdown()
        server.server_close()


async def _next(stream: Any) -> Any:
    return await stream.__anext__() if hasattr(stream, "__anext__") else next(stream)


async def _rest(stream: Any) -> list[Any]:
    return [event async for event in events_of(stream)]


@pytest.mark.parametrize("name", list(SCRIPTS))
async def test_a_header_event_reaches_the_caller_before_the_server_sends_any_content(mode: str, name: str) -> None:
    script = SCRIPTS[name]
    with _serving(script.head, script.rest) as server:
        stream = await resolve(script.create(sdk.wrap(script.client(mode, server.url))))
        first = await _next(stream)
        assert not server.rest_sent.is_set()  # the server still holds the content: the header came on its own
        assert script.is_header(first)
        server.release.set()
        rest = await _rest(stream)
        assert rest and not any(map(script.is_header, rest))


async def _events_and_error(stream: Any) -> tuple[list[Any], Exception | None]:
    events: list[Any] = []
    try:
        async for event in events_of(stream):
            events.append(event)
    except Exception as error:
        return events, error
    return events, None


async def _bare_and_wrapped(
    mode: str, rest: bytes, name: str = "chat role chunk", otel: Otel | None = None
) -> tuple[Any, ...]:
    """The events and the error of `SCRIPTS[name]`'s stream ending in `rest`, from the bare client and the
    wrapped one (its spans in `otel`, if given)."""
    script = SCRIPTS[name]
    answers = []
    for wrapped in (False, True):
        with _serving(script.head, rest) as server:
            server.release.set()
            client = script.client(mode, server.url)
            if wrapped:
                client = sdk.wrap(client, tracer_provider=otel.tracer_provider if otel is not None else None)
            answers.append(await _events_and_error(await resolve(script.create(client))))
    return tuple(answers)


def _end_attributes(otel: Otel) -> dict[str, Any]:
    """The attributes of the wrapped call's span, which ended without error."""
    [root] = [span for span in otel.spans() if span.parent is None]
    assert root.status.status_code is not StatusCode.ERROR
    attributes = dict(root.attributes or {})
    assert sc.ERROR_TYPE not in attributes and sc.KVWISE_STREAM_ABANDONED not in attributes
    return attributes


async def test_a_chat_stream_ended_by_done_without_a_finish_reason_ends_as_the_bare_one_does(
    mode: str, otel: Otel
) -> None:
    bare, wrapped = await _bare_and_wrapped(mode, _chunk({"content": "Hi"}) + sse("[DONE]"), otel=otel)
    assert bare[1] is None and wrapped[1] is None
    assert [event.model_dump() for event in wrapped[0]] == [event.model_dump() for event in bare[0]]
    assert len(bare[0]) == 2
    assert sc.KVWISE_STREAM_END_MARKER not in _end_attributes(otel)  # the server marked its end


async def test_a_responses_stream_ended_by_done_without_a_terminal_event_ends_as_the_bare_one_does(mode: str) -> None:
    bare, wrapped = await _bare_and_wrapped(mode, sse("[DONE]"), "responses response.created")
    assert bare[1] is None and wrapped[1] is None
    assert [event.type for event in wrapped[0]] == [event.type for event in bare[0]] == ["response.created"]


async def test_a_messages_stream_whose_message_stop_is_never_dispatched_ends_as_the_bare_one_does(
    mode: str, otel: Otel
) -> None:
    """A last event without its blank line is dropped by the client's decoder; the stop reason before it
    said the answer was whole, and the bare client accepts the end."""
    rest = SCRIPTS["messages message_start"].rest.removesuffix(b"\n\n")
    bare, wrapped = await _bare_and_wrapped(mode, rest, "messages message_start", otel)
    assert bare[1] is None and wrapped[1] is None
    assert [event.type for event in wrapped[0]] == [event.type for event in bare[0]]
    assert bare[0][-1].type == "message_delta"
    assert sc.KVWISE_STREAM_END_MARKER not in _end_attributes(otel)  # the stop reason said the answer was whole


UNMARKED_RESTS = {  # content after the header, then the body ends cleanly: no end marker, no finish reason
    "chat role chunk": _chunk({"content": "Hi"}),
    "messages message_start": SCRIPTS["messages message_start"].rest.split(b"event: content_block_stop")[0],
    "responses response.created": SCRIPTS["responses response.created"].rest.split(b"event: response.completed")[0],
}


@pytest.mark.parametrize("name", list(SCRIPTS))
async def test_a_body_that_ends_cleanly_without_its_end_marker_ends_as_the_bare_one_does(
    mode: str, name: str, otel: Otel
) -> None:
    """An end the bare client accepts is an end (issue 51): the same events, no exception; the span says
    the server never marked it, and estimates the usage the server did not send."""
    bare, wrapped = await _bare_and_wrapped(mode, UNMARKED_RESTS[name], name, otel)
    assert bare[1] is None and wrapped[1] is None
    assert [event.model_dump() for event in wrapped[0]] == [event.model_dump() for event in bare[0]]
    assert len(bare[0]) > 2 if name == "messages message_start" else len(bare[0]) == 2  # header and content
    attributes = _end_attributes(otel)
    assert attributes[sc.KVWISE_STREAM_END_MARKER] is False
    assert sc.GEN_AI_RESPONSE_FINISH_REASONS not in attributes
    if name == "messages message_start":  # message_start reported the input tokens: exact
        assert attributes[sc.GEN_AI_USAGE_INPUT_TOKENS] == 5 and sc.KVWISE_USAGE_ESTIMATED not in attributes
    else:
        assert attributes[sc.KVWISE_USAGE_ESTIMATED] is True
    assert attributes[sc.GEN_AI_USAGE_OUTPUT_TOKENS] >= 1


def test_an_answer_whose_stream_ended_unmarked_is_not_learnt_from() -> None:
    """Its output may have stopped short: adaptive caps and expected reads skip it."""
    usage = Usage(input_tokens=5, output_tokens=1)
    assert CallEnd(Ending.ANSWERED, usage=usage).usage_to_learn == usage
    assert CallEnd(Ending.ANSWERED, usage=usage, end_unmarked=True).usage_to_learn is None


BREAKS: dict[str, tuple[str, Callable[[Any], Any]]] = {
    "chat": ("openai_client", lambda c: c.chat.completions.create(model="m", messages=USER, stream=True)),
    "messages": (
        "anthropic_client",
        lambda c: c.messages.create(model=CLAUDE, max_tokens=500, messages=USER, stream=True),
    ),
    "responses": ("openai_client", lambda c: c.responses.create(model="gpt-5.4", input="go", stream=True)),
}


@pytest.mark.parametrize("api", list(BREAKS))
@pytest.mark.parametrize("cut_mode", ["drop", "reset"])
async def test_a_broken_stream_raises_the_bare_clients_class_chained_to_the_same_transport_error(
    simulator: Any, request: pytest.FixtureRequest, mode: str, api: str, cut_mode: str
) -> None:
    fixture, create = BREAKS[api]
    client = request.getfixturevalue(fixture)
    simulator.reply = "word " * 50
    errors = []
    for candidate in (client, sdk.wrap(client)):
        simulator.cut_stream_after(5, mode=cut_mode)
        errors.append((await _events_and_error(await resolve(create(candidate))))[1])
    bare, wrapped = errors
    assert bare is not None and bare.__cause__ is not None
    assert isinstance(wrapped, type(bare)) and isinstance(wrapped, sdk.StreamTruncated)
    assert type(wrapped.__cause__) is type(bare.__cause__)
    assert not isinstance(wrapped.__cause__, (openai.APIError, anthropic.APIError))


@pytest.mark.parametrize("api", ["chat", "messages"])
async def test_a_stream_that_times_out_raises_the_bare_clients_timeout_chained_to_the_same_transport_error(
    simulator: Any, request: pytest.FixtureRequest, mode: str, api: str
) -> None:
    fixture, create = BREAKS[api]
    client = request.getfixturevalue(fixture).with_options(timeout=READ_TIMEOUT_SECONDS, max_retries=0)
    errors = []
    for candidate in (client, sdk.wrap(client)):
        simulator.stall(STALL_SECONDS, at_token=3)
        errors.append((await _events_and_error(await resolve(create(candidate))))[1])
    bare, wrapped = errors
    # the client's timeout chained to the transport's (openai 2.x on, anthropic 1.x on), or the transport's own
    timeouts = (
        openai.APITimeoutError,
        anthropic.APITimeoutError,
        http_library(openai).TimeoutException,
        http_library(anthropic).TimeoutException,
    )
    assert isinstance(bare, timeouts)
    assert bare.__cause__ is not None
    assert isinstance(wrapped, type(bare)) and isinstance(wrapped, sdk.StreamTruncated)
    assert type(wrapped.__cause__) is type(bare.__cause__)
