"""The SDK's own exceptions.

    KvwiseError
    ├── UnsupportedClient (also a TypeError: `sdk.wrap` was given a client or release it does not know)
    └── StreamTruncated   (a stream's connection broke: raised as one that is also the wrapped client's
                           APIConnectionError, or APITimeoutError for a stream that timed out, where
                           the bare client raises that, so existing handlers catch it)

Everything else the caller sees is the exception the bare client raises for the same fault, as it
raises it: a 200 whose body is not JSON is its `json.JSONDecodeError`, sent once.
"""

from __future__ import annotations


class KvwiseError(Exception):
    """Root of the SDK's own exceptions."""


class UnsupportedClient(KvwiseError, TypeError):
    """`sdk.wrap` was given a client, or a client release, it does not know."""


class StreamTruncated(KvwiseError):
    """A stream broke after its 200: its connection dropped or timed out, where the bare client
    raises too.

    What is raised is `stream_truncated(...)` of the exception the bare client raised for the break
    (its `APIConnectionError` or `APITimeoutError`), its `__cause__` the transport error the client
    chained its own to: catch it as that, or as `sdk.StreamTruncated`. A body that ends cleanly
    without its end marker is no break: the bare client ends the iteration, and so does the wrapped
    one (the span says `kvwise.stream.end_marker=false`).
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
