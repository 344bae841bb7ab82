"""A small threaded HTTP/1.1 server on loopback, and `Exchange`, one request seen from the app.

Why hand-rolled on `http.server`: it starts in milliseconds, needs no event loop in the test thread,
and gives direct control of the socket, which the simulator needs to answer fast (`TCP_NODELAY` and
`Content-Length`, or each call stalls ~40 ms on delayed ACKs), to notice a client hanging up
mid-stream (poll the socket for EOF between tokens) and to inject faults (FIN or RST mid-body).
SSE answers use chunked transfer encoding, so a connection can be reused after a complete stream.
"""

from __future__ import annotations

import json
import select
import socket
import struct
import threading
import time
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from socketserver import TCPServer
from typing import Any

from .constants import CONNECTION_IDLE_TIMEOUT_SECONDS, HOST, SERVER_POLL_SECONDS

_GONE = (BrokenPipeError, ConnectionResetError, ConnectionAbortedError, TimeoutError)


class Exchange:
    """One request and the means to answer it.

    Write methods report a client that has gone away by returning False (never by raising), so the
    app can record how far it got.
    """

    def __init__(self, handler: _SimulatorHandler, raw: bytes) -> None:
        self._handler = handler
        self._socket: socket.socket = handler.connection
        self.method: str = handler.command
        self.path: str = handler.path.split("?", 1)[0]
        self.headers: dict[str, str] = {name.lower(): value for name, value in handler.headers.items()}
        self.raw = raw

    def send(
        self, status: int, payload: bytes, headers: Mapping[str, str], *, declared_length: int | None = None
    ) -> bool:
        """A whole answer with a `Content-Length` (`declared_length` may claim more than is sent)."""
        handler = self._handler
        try:
            handler.send_response(status)
            for name, value in headers.items():
                handler.send_header(name, value)
            handler.send_header("Content-Length", str(len(payload) if declared_length is None else declared_length))
            handler.end_headers()
            handler.wfile.write(payload)
        except _GONE:
            handler.close_connection = True
            return False
        return True

    def send_json(self, status: int, body: Any, headers: Mapping[str, str]) -> bool:
        payload = json.dumps(body, separators=(",", ":")).encode()
        return self.send(status, payload, {"Content-Type": "application/json", **headers})

    def start_stream(self, headers: Mapping[str, str]) -> bool:
        """Send the headers of a 200 `text/event-stream` answer with chunked transfer encoding."""
        handler = self._handler
        sse = {"Content-Type": "text/event-stream; charset=utf-8", "Cache-Control": "no-cache"}
        try:
            handler.send_response(200)
            for name, value in {**sse, **headers, "Transfer-Encoding": "chunked"}.items():
                handler.send_header(name, value)
            handler.end_headers()
        except _GONE:
            handler.close_connection = True
            return False
        return True

    def write_chunk(self, data: bytes) -> bool:
        """One chunk of the stream body; False when the client is gone."""
        try:
            self._handler.wfile.write(b"%x\r\n%b\r\n" % (len(data), data))
        except _GONE:
            self._handler.close_connection = True
            return False
        return True

    def end_stream(self) -> bool:
        """The terminating zero-length chunk: the HTTP body is complete."""
        return self.write_chunk(b"")

    def hung_up(self, wait: float = 0.0) -> bool:
        """Wait up to `wait` seconds; True as soon as the client has closed its end."""
        deadline = time.monotonic() + wait
        poller = select.poll()
        poller.register(self._socket, select.POLLIN | select.POLLHUP | select.POLLERR)
        if not poller.poll(max(wait, 0.0) * 1000):
            return False
        try:
            closed = self._socket.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
        except BlockingIOError:
            closed = False
        except OSError:
            closed = True
        if closed:
            self._handler.close_connection = True
            return True
        time.sleep(max(deadline - time.monotonic(), 0.0))  # unexpected bytes from the client: just wait
        return False

    def drop(self, *, reset: bool) -> None:
        """Close the connection now, without a word more: FIN, or RST when `reset`."""
        handler = self._handler
        handler.close_connection = True
        try:
            if reset:
                self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                handler.rfile.close()  # drops the makefile reference, so close() below really closes
                self._socket.close()
            else:
                self._socket.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass  # the client left first


class _SimulatorHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = CONNECTION_IDLE_TIMEOUT_SECONDS
    server: _SimulatorServer

    def setup(self) -> None:
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.server.track(self.connection, open_=True)

    def handle(self) -> None:
        try:
            super().handle()
        except OSError:
            pass  # the client reset or the simulator stopped: nothing left to answer

    def finish(self) -> None:
        try:
            super().finish()
        except OSError:
            pass
        finally:
            self.server.track(self.connection, open_=False)

    def _dispatch(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        self.server.app(Exchange(self, raw))

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _dispatch

    def log_message(self, format: str, *args: Any) -> None:
        """Silent: tests read `ProviderSimulator.requests`, not stderr."""


class _SimulatorServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128

    def __init__(self, app: Callable[[Exchange], None]) -> None:
        self.app = app
        self._lock = threading.Lock()
        self._connections: set[socket.socket] = set()
        super().__init__((HOST, 0), _SimulatorHandler)

    def server_bind(self) -> None:
        """Like `HTTPServer.server_bind` without its reverse DNS lookup, which can take seconds."""
        TCPServer.server_bind(self)
        self.server_name, self.server_port = HOST, self.server_address[1]

    def track(self, connection: socket.socket, *, open_: bool) -> None:
        with self._lock:
            (self._connections.add if open_ else self._connections.discard)(connection)

    def close_connections(self) -> None:
        """Shut every open connection, so idle keep-alive threads end and clients see the server gone."""
        with self._lock:
            connections = list(self._connections)
        for connection in connections:
            try:
                connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class LoopbackServer:
    """Serves `app` on 127.0.0.1 at a free port from a background thread, until `stop`."""

    def __init__(self, app: Callable[[Exchange], None]) -> None:
        self._server = _SimulatorServer(app)
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": SERVER_POLL_SECONDS},
            name="provider-simulator",
            daemon=True,
        )

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._server.close_connections()
        self._thread.join()
