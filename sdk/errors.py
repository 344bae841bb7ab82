"""The SDK's own exceptions, and the one place that decides what a failed call raises.

    KvwiseError
    ├── UnsupportedClient (also a TypeError: `sdk.wrap` was given a client or release it does not know)
    └── StreamTruncated   (raised as one that is also the wrapped client's APIConnectionError,
                           so existing handlers catch it)

Everything else the caller sees is the wrapped client's own exception. One fault the clients let
through raw is turned into theirs: a 200 whose JSON body arrived cut short (`json.JSONDecodeError`
from both) is a transport fault, retried like a dropped connection, and raised as the client's own
`APIConnectionError` once the attempts run out (`client_error`).
"""

from __future__ import annotations

import json
from collections.abc import Callable


class KvwiseError(Exception):
    """Root of the SDK's own exceptions."""


class UnsupportedClient(KvwiseError, TypeError):
    """`sdk.wrap` was given a client, or a client release, it does not know."""


class StreamTruncated(KvwiseError):
    """A stream ended without its final event after output had reached the caller.

    Both clients end iteration silently when the connection drops mid-stream; the partial output
    must not pass for a complete answer. What is raised is `stream_truncated(...)` of the wrapped
    client's `APIConnectionError`: catch it as that, or as `sdk.StreamTruncated`.
    """

    def __init__(self, message: str, *, request: object = None) -> None:
        Exception.__init__(self, message)
        self.message = message
        self.request = request
        self.body = None
        self.code = self.param = self.type = None


_TRUNCATED: dict[type[Exception], type[StreamTruncated]] = {}


def stream_truncated(connection_error: type[Exception]) -> type[StreamTruncated]:
    """`StreamTruncated` that is also `connection_error`, the wrapped client's `APIConnectionError`,
    so the handlers an app already has for that client catch it.

    Made per client package when first needed, not at import: a class with every installed client's
    error among its bases would import anthropic into an app that only uses openai (two seconds
    and 130,000 objects the garbage collector then walks for the process's life).
    """
    made = _TRUNCATED.get(connection_error)
    if made is None:
        made = _TRUNCATED[connection_error] = type("StreamTruncated", (StreamTruncated, connection_error), {"__module__": __name__})
    return made


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
