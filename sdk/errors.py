"""The SDK's own exceptions, and the one place that decides what a failed call raises.

    KvwiseError
    └── StreamTruncated   (also the installed clients' APIConnectionError, so existing handlers catch it)

Everything else the caller sees is the wrapped client's own exception. One fault the clients let
through raw is turned into theirs: a 200 whose JSON body arrived cut short (`json.JSONDecodeError`
from both) is a transport fault, retried like a dropped connection, and raised as the client's own
`APIConnectionError` once the attempts run out (`client_error`).
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable


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


def client_error(error: BaseException, connection_error: Callable[[str], Exception]) -> BaseException:
    """What the caller sees for a call that failed with `error`: the client's own exception.

    `connection_error(message)` makes the wrapped client's `APIConnectionError` (see
    `sdk.compat.connection_error`). A `json.JSONDecodeError` (a 200 body cut short) becomes one,
    with the parse error as its cause; anything else is kept.
    """
    if not isinstance(error, json.JSONDecodeError):
        return error
    failure = connection_error(
        f"the 200 response body is not complete JSON ({error.msg} at byte {error.pos}): the "
        "connection delivered it cut short on every attempt; send the request again later"
    )
    failure.__cause__ = error
    return failure
