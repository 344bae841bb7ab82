"""`--api-key`: every path but `/health` needs the key, as `Authorization: Bearer KEY` or `x-api-key: KEY`.

Either header works on every route (OpenAI clients send the first, Anthropic's the second). The
comparison is constant-time (`hmac.compare_digest`), and neither the key nor the headers are logged.
"""

from __future__ import annotations

import hmac

from starlette.types import ASGIApp, Receive, Scope, Send

from local_backend.server._constants import API_KEY_HEADER, AUTHORIZATION_HEADER, BEARER_PREFIX, HEALTH_PATH
from local_backend.server.errors import ApiError, ErrorKind, Flavor, error_response


class ApiKeyMiddleware:
    """Pure ASGI middleware (it never buffers a response, so streams pass through untouched)."""

    def __init__(self, app: ASGIApp, api_key: str):
        self._app = app
        self._key = api_key.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] == HEALTH_PATH or self._accepts(scope):
            await self._app(scope, receive, send)
            return
        error = ApiError("invalid or missing API key: send Authorization: Bearer KEY or x-api-key: KEY",
                         ErrorKind.UNAUTHORIZED)  # fmt: skip
        await error_response(error, Flavor.of_path(scope["path"]))(scope, receive, send)

    def _accepts(self, scope: Scope) -> bool:
        given = []
        for name, value in scope["headers"]:
            lowered = name.lower()
            if lowered == API_KEY_HEADER.encode():
                given.append(value)
            elif lowered == AUTHORIZATION_HEADER.encode() and value.lower().startswith(BEARER_PREFIX.encode()):
                given.append(value[len(BEARER_PREFIX):].strip())
        # compare every candidate, so timing does not tell which header carried a near-miss
        return sum(hmac.compare_digest(value, self._key) for value in given) > 0
