"""uvicorn's httptools protocol with a header deadline: a slow client cannot hold a connection forever.

uvicorn has no header timeout: a connection that trickles header bytes (or sends nothing at all)
stays open until the client stops, and a hundred such clients hold a hundred sockets and their
buffers. `HeaderDeadline` closes a connection whose request headers are not complete within
`HEADER_TIMEOUT_SECONDS` of its opening, or of the first byte of a later request on a kept-alive
connection (between requests, uvicorn's own `timeout_keep_alive` closes an idle one), as nginx's
`client_header_timeout` does. A body that is slow to come is the route's business (`read_json`).

    uvicorn.Config(app, http=HeaderDeadline)   # what `serve` and `serve_in_thread` pass

It overrides three of httptools' parser callbacks, which uvicorn's protocol implements as public
methods (`on_message_begin`, `on_headers_complete`) and the asyncio protocol's `connection_made`
/ `connection_lost`; `header_timeout` on a subclass changes the bound (tests use a short one).
"""

from __future__ import annotations

import asyncio

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from local_backend.server._constants import HEADER_TIMEOUT_SECONDS


class HeaderDeadline(HttpToolsProtocol):
    """Closes the connection when a request's headers are not complete in `header_timeout` seconds."""

    header_timeout: float = HEADER_TIMEOUT_SECONDS
    _deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if self._deadline is None:
            self._arm()

    def on_headers_complete(self) -> None:
        self._disarm()
        super().on_headers_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        self._deadline = self.loop.call_later(self.header_timeout, self._headers_late)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _headers_late(self) -> None:
        self._deadline = None
        if not self.transport.is_closing():
            self.transport.close()
