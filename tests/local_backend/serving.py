"""A real server in a background thread around an engine on a test checkpoint, for the server tests."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from local_backend import Engine
from local_backend.server import create_app, serve_in_thread


@dataclass(frozen=True)
class Served:
    url: str
    engine: Engine


@contextmanager
def served_engine(checkpoint: Path, app_options: dict[str, Any] | None = None, **engine_options: Any) -> Iterator[Served]:
    """Serve `checkpoint` (model name "tiny") until the block exits, then close the engine."""
    engine = Engine.from_pretrained(checkpoint, device="cpu", **engine_options)
    try:
        with serve_in_thread(create_app(engine, model_name="tiny", **(app_options or {}))) as url:
            yield Served(url, engine)
    finally:
        engine.close()
