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
    command = [sys.executable, "-m", "local_backend", "serve", "--model", model, "--host", "127.0.0.1", "--port", str(port)]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    base_url = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(base_url, process, on_wait)
        yield base_url
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()


def _wait_healthy(base_url: str, process: subprocess.Popen[bytes], on_wait: Callable[[float], None] | None) -> None:
    started = time.monotonic()
    while time.monotonic() - started < STARTUP_TIMEOUT_SECONDS:
        if process.poll() is not None:
            error = process.stderr.read().decode(errors="replace") if process.stderr else ""
            raise RuntimeError(f"the local server exited with {process.returncode}:\n{error[-2000:]}")
        try:
            with urllib.request.urlopen(f"{base_url}/health", timeout=1) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        if on_wait is not None:
            on_wait(time.monotonic() - started)
        time.sleep(POLL_SECONDS)
    raise TimeoutError(f"the local server at {base_url} was not healthy after {STARTUP_TIMEOUT_SECONDS:.0f} s")
