"""The SDK's own exceptions.

    KvwiseError
    └── StreamTruncated   (also the installed clients' APIConnectionError, so existing handlers catch it)

Everything else the caller sees is the wrapped client's own exception.
"""

from __future__ import annotations

import importlib


class KvwiseError(Exception):
    """Root of the SDK's own exceptions."""


def _connection_errors() -> tuple[type[Exception], ...]:
    bases: list[type[Exception]] = []
    for module_name in ("openai", "anthropic"):
        try:
            bases.append(importlib.import_module(module_name).APIConnectionError)
        except ImportError:
            continue
    return tuple(bases)


class StreamTruncated(KvwiseError, *_connection_errors()):  # type: ignore[misc]
    """A stream ended without its final event after output had reached the caller.

    Both clients end iteration silently when the connection drops mid-stream; the partial output
    must not pass for a complete answer. Catch it as the client's `APIConnectionError`.
    """

    def __init__(self, message: str, *, request: object = None) -> None:
        Exception.__init__(self, message)
        self.message = message
        self.request = request
        self.body = None
        self.code = self.param = self.type = None
