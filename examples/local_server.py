"""Start the local backend in a child process on a free loopback port, for the demo and examples."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator

STARTUP_TIMEOUT_SECONDS = 120.0
POLL_SECONDS = 0.25


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def local_server(model: str = "default", on_wait: Callable[[float], None] | None = None) -> Iterator[str]:
    """Run `python -m local_backend serve` until the block exits; yield its base URL (no `/v1`)."""
    port = free_port()
    command = [
        sys.executable,
        "-m",
        "local_backend",
        "serve",
        "--model",
        model,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
    ]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    base_url = f"http://127.0.0.1:{port}"
    try:
        stderr = process.stderr
        wait_healthy(
            f"{base_url}/health",
            process,
            lambda: stderr.read().decode(errors="replace")[-2000:] if stderr else "",
            on_wait,
        )
        yield base_url
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()


def wait_healthy(
    health_url: str,
    process: subprocess.Popen[bytes],
    describe_exit: Callable[[], str],
    on_wait: Callable[[float], None] | None = None,
    timeout: float = STARTUP_TIMEOUT_SECONDS,
) -> None:
    """Poll `health_url` until it answers 200; raise if `process` exits first (`describe_exit` says why)."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if process.poll() is not None:
            raise RuntimeError(f"{health_url}: the server exited with {process.returncode}:\n{describe_exit()}")
        try:
            with urllib.request.urlopen(health_url, timeout=1) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        if on_wait is not None:
            on_wait(time.monotonic() - started)
        time.sleep(POLL_SECONDS)
    raise TimeoutError(f"{health_url} was not healthy after {timeout:.0f} s")
