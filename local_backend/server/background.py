"""Run an app with uvicorn in a background thread on a free loopback port (tests, demos, notebooks).

with serve_in_thread(create_app(engine)) as base_url:
    openai.OpenAI(base_url=f"{base_url}/v1", api_key="x").models.list()
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from collections.abc import Iterator

import uvicorn
from starlette.types import ASGIApp

from local_backend.server._constants import DEFAULT_HOST
from local_backend.server.http_protocol import BoundedHttp

_STARTUP_POLL_SECONDS = 0.01


@contextlib.contextmanager
def serve_in_thread(
    app: ASGIApp, host: str = DEFAULT_HOST, http: type[asyncio.Protocol] = BoundedHttp
) -> Iterator[str]:
    """Yield the base URL (no `/v1`) once the server accepts connections; stop it on exit.

    `http` is uvicorn's protocol class (by default `BoundedHttp`, which holds each request to the
    wire bounds: slow headers or bodies, huge headers).

    The socket is bound before the thread starts (port 0: the OS picks a free one), so two
    servers never race for a port. The explicit IPPROTO_TCP matters: asyncio sets TCP_NODELAY only
    on sockets whose proto says TCP, and without it each JSON answer (headers, then body) waits
    for the client's delayed ACK (Nagle's algorithm holds the body until the headers are acknowledged).
    """
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off", http=http))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="kvwise-server", daemon=True)
    thread.start()
    try:
        while not server.started:
            if not thread.is_alive():
                raise RuntimeError("the server thread exited before it started; see its log")
            time.sleep(_STARTUP_POLL_SECONDS)
        yield f"http://{host}:{port}"
    finally:
        server.should_exit = True
        thread.join()
        sock.close()
