"""Bounds on the wire (issue 42 item 4): a body trickled at a byte at a time, a Content-Length larger
than what is sent, a chunked body that never ends, a 16 MB header and a hundred headers were all
held open (or read whole); now each is answered once (408 or 431, in the API's error form) and its
connection closed, and the next ordinary request is answered."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest

from local_backend.__main__ import parse_args, wire_limits
from local_backend.server import create_app, serve_in_thread
from local_backend.server._constants import BODY_TIMEOUT_SECONDS, MAX_HEADER_BYTES, MAX_HEADERS
from local_backend.server.http_protocol import BoundedHttp, WireLimits
from tests.local_backend.serving import Served, ServedEngines

BODY_TIMEOUT = 0.5
CLIENT_TIMEOUT_SECONDS = 30.0
CHAT = {"model": "tiny", "max_tokens": 1, "messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture(scope="module")
def url(serve: ServedEngines, llama_dir: Path) -> Iterator[str]:
    served: Served = serve(llama_dir, max_model_len=64, kv_cache_memory=2**20)
    http = BoundedHttp.with_limits(WireLimits(body_timeout=BODY_TIMEOUT))
    with serve_in_thread(create_app(served.engine, model_name="tiny"), http=http) as base_url:
        yield base_url


def _connect(url: str) -> socket.socket:
    host, port = url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)))
    sock.settimeout(0.1)
    return sock


def _answer_then_close(sock: socket.socket, trickle: bytes = b"") -> bytes:
    """What the server sends before it closes the connection (sending `trickle` every tenth of a
    second meanwhile); fails if it is still open at the client's deadline."""
    received = b""
    deadline = time.monotonic() + CLIENT_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        try:
            if trickle:
                sock.sendall(trickle)
            chunk = sock.recv(65536)
        except TimeoutError:
            continue
        except OSError:  # reset or broken pipe: closed
            return received
        if not chunk:
            return received
        received += chunk
    raise AssertionError(f"the connection was still open after {CLIENT_TIMEOUT_SECONDS} s")


def _status_and_error(answer: bytes) -> tuple[int, str]:
    head, _, body = answer.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body)["error"]["message"]


def _still_serving(url: str) -> None:
    with httpx2.Client(base_url=url, timeout=CLIENT_TIMEOUT_SECONDS) as http:
        assert http.post("/v1/chat/completions", json=CHAT).status_code == 200


def _head(path: str = "/v1/chat/completions", extra: bytes = b"") -> bytes:
    return f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n".encode() + extra


@pytest.mark.parametrize("trickle", [b"", b" "], ids=["promised and never sent", "a byte at a time"])
def test_a_body_not_in_by_the_body_deadline_is_a_408_and_closed(url, trickle):
    with _connect(url) as sock:
        sock.sendall(_head(extra=b"Content-Length: 100000\r\n\r\n") + b'{"model": ')
        status, message = _status_and_error(_answer_then_close(sock, trickle))
    assert status == 408 and "did not arrive within" in message
    _still_serving(url)


def test_a_chunked_body_that_never_ends_is_a_408_and_closed(url):
    with _connect(url) as sock:
        sock.sendall(_head("/v1/messages", b"Transfer-Encoding: chunked\r\n\r\n") + b'2\r\n{"\r\n')
        answer = _answer_then_close(sock, b"1\r\n \r\n")
    assert _status_and_error(answer)[0] == 408
    assert json.loads(answer.partition(b"\r\n\r\n")[2])["type"] == "error"  # Anthropic's form on its route
    _still_serving(url)


@pytest.mark.parametrize(
    ("size", "piece"),
    [(MAX_HEADER_BYTES + 1, MAX_HEADER_BYTES * 2), (MAX_HEADER_BYTES + 1, 4096), (16 * 1024**2, 65536)],
    ids=["one write, the whole head in one read", "in pieces", "16 MB"],
)
def test_headers_larger_than_the_bound_are_a_431_and_closed(url, size, piece):
    """The 16 MB header is never read whole: the server answers and closes while it is being sent (a
    reset may then drop the answer on the client's side: a close is the other clean end). A head the
    server reads whole in one go is refused as well (CI once saw it reach the app as a 400)."""
    request = _head(extra=b"X-Big: ") + b"x" * size + b"\r\n\r\n"
    sent = 0
    with _connect(url) as sock:
        sock.settimeout(CLIENT_TIMEOUT_SECONDS)
        try:
            while sent < len(request):
                sock.sendall(request[sent : sent + piece])
                sent += piece
        except OSError:  # closed by the server mid-header
            pass
        sock.settimeout(0.1)
        answer = _answer_then_close(sock)
    if answer or size <= 65536:
        status, message = _status_and_error(answer)
        assert status == 431 and f"pass {MAX_HEADER_BYTES} bytes" in message
    else:
        assert sent < len(request)
    _still_serving(url)


def test_a_request_line_longer_than_the_bound_is_a_431_and_closed(url):
    with _connect(url) as sock:
        sock.sendall(_head("/v1/chat/completions?q=" + "x" * MAX_HEADER_BYTES, b"Content-Length: 2\r\n\r\n{}"))
        status, message = _status_and_error(_answer_then_close(sock))
    assert status == 431 and f"pass {MAX_HEADER_BYTES} bytes" in message
    _still_serving(url)


def test_more_header_fields_than_the_bound_are_a_431_and_closed(url):
    fields = b"".join(b"X-F%d: 1\r\n" % i for i in range(MAX_HEADERS + 1))
    with _connect(url) as sock:
        sock.sendall(_head(extra=fields + b"Content-Length: 2\r\n\r\n{}"))
        status, message = _status_and_error(_answer_then_close(sock))
    assert status == 431 and f"more than {MAX_HEADERS} header fields" in message
    _still_serving(url)


def test_a_prompt_body_and_kept_alive_requests_are_served(url):
    with httpx2.Client(base_url=url, timeout=CLIENT_TIMEOUT_SECONDS) as http:
        for _ in range(3):  # one connection, its deadlines re-armed each request
            assert http.post("/v1/chat/completions", json=CHAT).status_code == 200
        time.sleep(BODY_TIMEOUT * 2)  # an idle kept-alive connection is not a late body
        assert http.post("/v1/chat/completions", json=CHAT).status_code == 200


def test_the_cli_options_set_the_wire_bounds_and_refuse_a_bound_that_is_not_positive():
    args = parse_args(
        ["serve", "--body-timeout", "60", "--header-timeout", "5", "--max-header-bytes", "8192", "--max-headers", "50"]
    )
    assert wire_limits(args) == WireLimits(header_timeout=5, body_timeout=60, max_header_bytes=8192, max_headers=50)
    assert wire_limits(parse_args(["serve"])).body_timeout == BODY_TIMEOUT_SECONDS
    with pytest.raises(ValueError, match="max_headers"):
        wire_limits(parse_args(["serve", "--max-headers", "0"]))
