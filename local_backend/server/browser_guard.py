"""Safe by default on a laptop: no web page the user visits can drive the server.

A page on any site may send a "simple" cross-site request (a `text/plain` POST) to
`http://127.0.0.1:8000` without asking first, and, by DNS rebinding, may even read the answer: its
own name (`evil.example`) is made to resolve to 127.0.0.1, so the browser takes the server for the
page's own origin. Local inference servers have been driven that way. So, on every route but
`/health`:

- `Origin`: a request a browser sends from a page carries its page's origin; one not allowed by
  `allowed_origins` (`--allowed-origins`; `*`: any) is refused (403). Clients outside a browser
  (the openai and anthropic SDKs, curl) send none.
- `Host`: the name the client asked for; without an API key, only the server's own names are
  accepted (`allowed_hosts`; by default the loopback names and addresses, any port), which is what
  a rebinding page cannot forge (403). With a key, the key proves the caller, and any Host is
  accepted unless `allowed_hosts` says otherwise. A request without a Host (HTTP/1.0) is no browser's.
- `Content-Type`: a request with a body must be `application/json` (415), the one type a page
  cannot send cross-site without a CORS preflight, which `allowed_origins` then decides.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from starlette.types import ASGIApp, Receive, Scope, Send

from local_backend.server._constants import HEALTH_PATH
from local_backend.server.errors import ApiError, ErrorKind, Flavor, error_response

ANY: Final = "*"
JSON_MEDIA_TYPE: Final = b"application/json"
BODY_METHODS: Final = frozenset({"POST", "PUT", "PATCH"})


class BrowserGuard:
    """Pure ASGI middleware refusing what only a hostile page would send (see the module doc).

    `allowed_hosts`: host names or addresses (no port) the server answers to, or None for any.
    """

    def __init__(self, app: ASGIApp, allowed_hosts: Sequence[str] | None, allowed_origins: Sequence[str]):
        self._app = app
        self._hosts = None if allowed_hosts is None or ANY in allowed_hosts else {_hostname(h) for h in allowed_hosts}
        self._origins = None if ANY in allowed_origins else {o.rstrip("/").lower() for o in allowed_origins}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        refusal = self._refusal(scope) if scope["type"] == "http" and scope["path"] != HEALTH_PATH else None
        if refusal is None:
            await self._app(scope, receive, send)
            return
        await error_response(refusal, Flavor.of_path(scope["path"]))(scope, receive, send)

    def _refusal(self, scope: Scope) -> ApiError | None:
        headers = {name: value for name, value in scope["headers"] if name in (b"origin", b"host", b"content-type")}
        origin = headers.get(b"origin")
        if origin is not None and self._origins is not None and origin.decode("latin-1").lower() not in self._origins:
            return ApiError(
                f"requests from the web page at {origin.decode('latin-1')[:100]!r} are not allowed: "
                "start the server with --allowed-origins ORIGIN to let that page call it",
                ErrorKind.FORBIDDEN,
            )
        host = headers.get(b"host")
        if host is not None and self._hosts is not None and _hostname(host.decode("latin-1")) not in self._hosts:
            return ApiError(
                f"this server does not answer for the host {host.decode('latin-1')[:100]!r}: start it "
                "with --allowed-hosts NAME (or --api-key) to serve other names",
                ErrorKind.FORBIDDEN,
            )
        if scope["method"] in BODY_METHODS:
            media_type = headers.get(b"content-type", b"").split(b";")[0].strip().lower()
            if media_type != JSON_MEDIA_TYPE:
                return ApiError(
                    f"the body must be sent as Content-Type: application/json, not "
                    f"{media_type.decode('latin-1')[:100]!r}",
                    ErrorKind.UNSUPPORTED_MEDIA_TYPE,
                )
        return None


def _hostname(host: str) -> str:
    """`host` without its port or brackets, lower case, without a trailing dot (`[::1]:8000` -> `::1`)."""
    host = host.strip().lower()
    if host.startswith("["):
        host = host[1:].split("]", 1)[0]
    elif host.count(":") == 1:
        host = host.split(":", 1)[0]
    return host.rstrip(".")
