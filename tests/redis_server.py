"""A real Redis for tests: Debian's `redis-server` on a free loopback port, no persistence.

with RedisServer() as server:          # server.url == "redis://127.0.0.1:PORT/0"
    server.stop(); server.start()      # an outage, then the same server back on the same port
    server.pause(); server.resume()    # a store that answers nothing for a while
"""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import time
from types import TracebackType

import redis

START_DEADLINE_SECONDS = 20.0


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class RedisServer:
    """`redis-server` in a process of its own; `password` makes it refuse clients without it."""

    def __init__(self, password: str | None = None) -> None:
        binary = shutil.which("redis-server") or shutil.which("valkey-server")
        if binary is None:
            raise RuntimeError(
                "redis-server is not installed: `make test` installs it (sudo apt-get install -y redis-server)"
            )
        self._binary, self._password = binary, password
        self.port = _free_port()
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        auth = f":{self._password}@" if self._password else ""
        return f"redis://{auth}127.0.0.1:{self.port}/0"

    def url_bounded(self, seconds: float) -> str:
        """`url` with each command bounded at `seconds` instead of the SDK's own bound (the `redis`
        client reads the query): on the suite's loaded machine a process can stall past the production
        bound, which would degrade calls whose sharing a test asserts (the bound is tested apart)."""
        return f"{self.url}?socket_timeout={seconds}&socket_connect_timeout={seconds}"

    def client(self) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port, password=self._password)

    def start(self) -> None:
        command = [self._binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        if self._password:
            command += ["--requirepass", self._password]
        self._process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + START_DEADLINE_SECONDS
        while True:
            try:
                if self.client().ping():
                    return
            except redis.RedisError:
                if time.monotonic() > deadline or self._process.poll() is not None:
                    raise RuntimeError(f"redis-server did not start on port {self.port}") from None
                time.sleep(0.02)

    def pause(self) -> None:
        """Stop the server's process (SIGSTOP): connections still open, nothing answers, a slow store."""
        assert self._process is not None
        self._process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        assert self._process is not None
        self._process.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        if self._process is not None:
            self._process.terminate()
            self._process.wait(timeout=10)
            self._process = None

    def __enter__(self) -> RedisServer:
        self.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.stop()
