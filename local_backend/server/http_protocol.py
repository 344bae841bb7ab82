"""uvicorn's httptools protocol with bounds on the wire: a slow or bloated client cannot hold a connection.

uvicorn bounds none of these: a connection that trickles its headers (or sends nothing) stays open
until the client stops; a body sent at a byte a second, a Content-Length larger than what is sent,
or a chunked body that never ends is waited for forever; a 16 MB header is read whole (a few dozen
such connections doubled the server's memory: docs/benchmarks.md, `by_hand`). `BoundedHttp`
answers each once and closes:

- headers not complete within `header_timeout` of the connection's opening, or of a kept-alive
  connection's next request (`--header-timeout`; nginx's `client_header_timeout`): closed;
- more than `max_header_bytes` received before the headers end (counted as bytes arrive, and again
  as the parser hands over the URL and each field, since a whole head can arrive in one read), or
  more than `max_headers` header fields (`--max-header-bytes`, `--max-headers`): 431, closed;
- a body (by Content-Length or chunked) not complete within `body_timeout` of the headers'
  end (`--body-timeout`): 408 if no answer has begun, closed.

Between requests, uvicorn's own `timeout_keep_alive` closes an idle connection.

    uvicorn.Config(app, http=BoundedHttp.with_limits(WireLimits(body_timeout=60)))

It overrides httptools' parser callbacks, which uvicorn's protocol implements as public methods
(`on_message_begin`, `on_url`, `on_header`, `on_headers_complete`, `on_body`,
`on_message_complete`), and the asyncio protocol's `connection_made` / `data_received` /
`connection_lost`.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import ClassVar

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from local_backend.server._constants import BODY_TIMEOUT_SECONDS, HEADER_TIMEOUT_SECONDS, MAX_HEADER_BYTES, MAX_HEADERS
from local_backend.server.errors import ApiError, ErrorKind, Flavor, error_body, status_of

_REASONS = {408: b"Request Timeout", 431: b"Request Header Fields Too Large"}


@dataclass(frozen=True, slots=True)
class WireLimits:
    """The bounds one connection's requests are held to (see the module doc)."""

    header_timeout: float = HEADER_TIMEOUT_SECONDS
    body_timeout: float = BODY_TIMEOUT_SECONDS
    max_header_bytes: int = MAX_HEADER_BYTES
    max_headers: int = MAX_HEADERS

    def __post_init__(self) -> None:
        for name in ("header_timeout", "body_timeout", "max_header_bytes", "max_headers"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name}={getattr(self, name)!r} must be > 0")


class BoundedHttp(HttpToolsProtocol):
    """uvicorn's protocol holding each request to `limits`; `with_limits` makes one with other bounds."""

    limits: ClassVar[WireLimits] = WireLimits()
    _deadline: asyncio.TimerHandle | None = None
    _header_bytes = 0
    _parsed_bytes = 0
    _header_count = 0
    _in_headers = True
    _refused = False

    @classmethod
    def with_limits(cls, limits: WireLimits) -> type[BoundedHttp]:
        """This protocol with `limits` (uvicorn takes a class and builds one per connection)."""
        return type(cls.__name__, (cls,), {"limits": limits})

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm(self.limits.header_timeout, self._headers_late)

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return
        super().data_received(data)
        if self._in_headers and not self._refused:  # the parser holds all of it, waiting for the headers' end
            self._header_bytes += len(data)
            self._refuse_past_the_byte_bound(self._header_bytes)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._in_headers, self._header_bytes, self._parsed_bytes, self._header_count = True, 0, 0, 0
        if self._deadline is None:
            self._arm(self.limits.header_timeout, self._headers_late)

    def on_url(self, url: bytes) -> None:
        if self._refused:
            return
        super().on_url(url)
        self._parsed_bytes += len(url)
        self._refuse_past_the_byte_bound(self._parsed_bytes)

    def on_header(self, name: bytes, value: bytes) -> None:
        if self._refused:
            return
        self._header_count += 1
        if self._header_count > self.limits.max_headers:
            self._refuse(431, f"the request has more than {self.limits.max_headers} header fields")
            return
        super().on_header(name, value)
        self._parsed_bytes += len(name) + len(value) + len(b": \r\n")
        self._refuse_past_the_byte_bound(self._parsed_bytes)

    def on_headers_complete(self) -> None:
        if self._refused:
            return
        self._disarm()
        self._in_headers = False
        super().on_headers_complete()
        self._arm(self.limits.body_timeout, self._body_late)

    def on_body(self, body: bytes) -> None:
        if not self._refused:
            super().on_body(body)

    def on_message_complete(self) -> None:
        if self._refused:
            return
        self._disarm()
        super().on_message_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _refuse_past_the_byte_bound(self, head_bytes: int) -> None:
        if head_bytes > self.limits.max_header_bytes:
            self._refuse(431, f"the request's headers pass {self.limits.max_header_bytes} bytes")

    def _arm(self, seconds: float, late: object) -> None:
        self._disarm()
        self._deadline = self.loop.call_later(seconds, late)  # type: ignore[arg-type]

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _headers_late(self) -> None:
        self._deadline = None
        if not self.transport.is_closing():
            self.transport.close()

    def _body_late(self) -> None:
        self._deadline = None
        cycle = self.cycle
        if cycle is not None and cycle.response_started:
            self.transport.close()
        else:
            self._refuse(408, f"the request's body did not arrive within {self.limits.body_timeout:g} s")

    def _refuse(self, status: int, message: str) -> None:
        """Answer `status` with the API's error body (by the path, when known) and close the connection."""
        self._refused = True
        self._disarm()
        if self.transport.is_closing():
            return
        scope = getattr(self, "scope", None) or {}
        flavor = Flavor.of_path(str(scope.get("path") or getattr(self, "url", b"").decode("latin-1")))
        error = ApiError(message, ErrorKind.REQUEST_TIMEOUT if status == 408 else ErrorKind.HEADERS_TOO_LARGE)
        body = json.dumps(error_body(error, flavor)).encode()
        head = b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\nconnection: close\r\n\r\n"
        self.transport.write(head % (status_of(error, flavor), _REASONS[status], len(body)) + body)
        self.transport.close()
