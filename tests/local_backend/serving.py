"""A real server in a background thread around an engine on a test checkpoint, for the server tests."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from local_backend import Engine
from local_backend.engine.engine import EngineStats
from local_backend.server import create_app, serve_in_thread


@dataclass(frozen=True)
class Served:
    url: str
    engine: Engine


@contextmanager
def served_engine(
    checkpoint: Path | str, app_options: dict[str, Any] | None = None, **engine_options: Any
) -> Iterator[Served]:
    """Serve `checkpoint` (a folder, or "default": the bundled model) as model "tiny" until the block exits,
    then close the engine."""
    engine = Engine.from_pretrained(checkpoint, device="cpu", **engine_options)
    try:
        with serve_in_thread(create_app(engine, model_name="tiny", **(app_options or {}))) as url:
            yield Served(url, engine)
    finally:
        engine.close()


class ServedEngines:
    """Each distinct served configuration started once and kept until `close`: the server test modules
    share one per configuration instead of each starting its own. A module taking one gets it idle
    with an empty prefix cache, so it starts as on a fresh server."""

    def __init__(self) -> None:
        self._stack = ExitStack()
        self._served: dict[str, Served] = {}

    def __call__(
        self, checkpoint: Path | str, app_options: dict[str, Any] | None = None, **engine_options: Any
    ) -> Served:
        key = repr((str(checkpoint), sorted((app_options or {}).items()), sorted(engine_options.items())))
        served = self._served.get(key)
        if served is None:
            served = self._served[key] = self._stack.enter_context(
                served_engine(checkpoint, app_options, **engine_options)
            )
        wait_idle(served.engine)
        served.engine.reset_prefix_cache()
        return served

    def close(self) -> None:
        self._stack.close()


IDLE_DEADLINE_SECONDS = 30.0  # generous: the machines are noisy
FUZZ_CLIENT_TIMEOUT_SECONDS = 30.0
SERVER_ERROR_TYPES = ('"server_error"', '"api_error"')
"""Error types of a 500 in OpenAI's and Anthropic's bodies: never expected, not even inside a stream."""


def wait_idle(engine: Engine, timeout: float = IDLE_DEADLINE_SECONDS) -> EngineStats:
    """The engine's stats once no request runs or waits and no block is in use, or at the deadline."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        stats = engine.stats()
        if stats.num_running == stats.num_waiting == stats.blocks_used == 0:
            return stats
        time.sleep(0.01)
    return engine.stats()
