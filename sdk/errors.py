"""The SDK's own exceptions.

    KvwiseError
    ├── UnsupportedClient (also a TypeError: `sdk.wrap` was given a client or release it does not know)
    └── StreamTruncated   (raised as one that is also the wrapped client's APIConnectionError, or
                           APITimeoutError for a stream that timed out, so existing handlers catch it)

Everything else the caller sees is the exception the bare client raises for the same fault, as it
raises it: a 200 whose body is not JSON is its `json.JSONDecodeError`, sent once.
"""

from __future__ import annotations


class KvwiseError(Exception):
    """Root of the SDK's own exceptions."""


class UnsupportedClient(KvwiseError, TypeError):
    """`sdk.wrap` was given a client, or a client release, it does not know."""


class StreamTruncated(KvwiseError):
    """A stream ended without its final event: its connection dropped or timed out, or its body
    ended early.

    Both clients end iteration silently when a body ends early; the partial output must not pass
    for a complete answer. What is raised is `stream_truncated(...)` of the exception the bare
    client raised for the break (its `APIConnectionError` or `APITimeoutError`; the former where
    it raised none), its `__cause__` the transport error the client chained its own to: catch it
    as that, or as `sdk.StreamTruncated`.
    """

    def __init__(self, message: str, *, request: object = None) -> None:
        Exception.__init__(self, message)
        self.message = message
        self.request = request
        self.body = None
        self.code = self.param = self.type = None


_TRUNCATED: dict[type[Exception], type[StreamTruncated]] = {}


def stream_truncated(connection_error: type[Exception]) -> type[StreamTruncated]:
    """`StreamTruncated` that is also `connection_error` (the wrapped client's `APIConnectionError`
    or `APITimeoutError`), so the handlers an app already has for that client catch it.

    Made per client package when first needed, not at import: a class with every installed client's
    error among its bases would import anthropic into an app that only uses openai (two seconds
    and 130,000 objects the garbage collector then walks for the process's life).
    """
    made = _TRUNCATED.get(connection_error)
    if made is None:
        made = _TRUNCATED[connection_error] = type(
            "StreamTruncated", (StreamTruncated, connection_error), {"__module__": __name__}
        )
    return made
