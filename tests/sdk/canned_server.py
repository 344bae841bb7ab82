"""A loopback HTTP server that answers each request with the body a test hands it, for the shapes the
provider simulator does not make (a tool call with given arguments, a body without `choices`): the
real clients, wrapped and bare, read the same bytes, so a test compares what each gives the caller."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest


@dataclass(frozen=True, slots=True)
class Seen:
    """One request as it arrived."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any


@dataclass(slots=True)
class Canned:
    """What the server answers: `body` (JSON, or SSE `events` when set) with `status`, to every request."""

    body: Any = field(default_factory=dict)
    events: list[Any] | None = None
    status: int = 200
    seen: list[Seen] = field(default_factory=list)
    url: str = ""

    def answer(self, body: Any = None, *, events: list[Any] | None = None, status: int = 200) -> None:
        self.body, self.events, self.status = body, events, status


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def do_POST(self) -> None:  # noqa: N802 (http.server's spelling)
        self._answer()

    def do_GET(self) -> None:  # noqa: N802
        self._answer()

    def _answer(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        canned = self.server.canned
        canned.seen.append(Seen(self.command, self.path, dict(self.headers), json.loads(raw) if raw else None))
        if canned.events is not None:
            payload = "".join(f"data: {json.dumps(event)}\n\n" for event in canned.events) + "data: [DONE]\n\n"
            data, kind = payload.encode(), "text/event-stream"
        else:
            data, kind = json.dumps(canned.body).encode(), "application/json"
        self.send_response(canned.status)
        self.send_header("content-type", kind)
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, canned: Canned) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.canned = canned


@pytest.fixture
def canned() -> Iterator[Canned]:
    """A fresh canned server on a free loopback port (`canned.url` is its base URL)."""
    answers = Canned()
    server = _Server(answers)
    answers.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield answers
    server.shutdown()
    server.server_close()
