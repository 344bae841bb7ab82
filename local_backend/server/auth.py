"""`--api-key`: every path but `/health` needs a key, as `Authorization: Bearer KEY` or `x-api-key: KEY`.

Either header works on every route (OpenAI clients send the first, Anthropic's the second). The
server may hold several keys; each key is a tenant. A request's tenant id is a hash of its key
(never the key itself), and it salts the request's prefix-cache blocks, so one key can never get a
cache hit, or a faster first token, from another key's prompt. Without keys every request is one
tenant. Comparisons are constant-time (`hmac.compare_digest`, every candidate against every key),
and neither the keys nor the headers are logged.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Sequence

from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from local_backend.server._constants import (
    API_KEY_HEADER,
    AUTHORIZATION_HEADER,
    BEARER_PREFIX,
    HEALTH_PATH,
    TENANT_HASH_PERSON,
    TENANT_ID_BYTES,
    TENANT_STATE,
)
from local_backend.server.errors import ApiError, ErrorKind, Flavor, error_response


def tenant_id(api_key: str) -> str:
    """The tenant of a key: a keyed-purpose blake2b of it, hex (the key cannot be read back from it)."""
    return hashlib.blake2b(api_key.encode(), digest_size=TENANT_ID_BYTES, person=TENANT_HASH_PERSON).hexdigest()


def tenant_of(request: Request) -> str | None:
    """The tenant the key middleware found for this request; None when the server has no keys."""
    tenant: str | None = request.scope.get("state", {}).get(TENANT_STATE)
    return tenant


class ApiKeyMiddleware:
    """Pure ASGI middleware (it never buffers a response, so streams pass through untouched)."""

    def __init__(self, app: ASGIApp, api_keys: Sequence[str]):
        self._app = app
        self._keys = [(key.encode(), tenant_id(key)) for key in api_keys]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] == HEALTH_PATH:
            await self._app(scope, receive, send)
            return
        tenant = self._tenant(scope)
        if tenant is not None:
            scope.setdefault("state", {})[TENANT_STATE] = tenant
            await self._app(scope, receive, send)
            return
        error = ApiError("invalid or missing API key: send Authorization: Bearer KEY or x-api-key: KEY",
                         ErrorKind.UNAUTHORIZED)  # fmt: skip
        await error_response(error, Flavor.of_path(scope["path"]))(scope, receive, send)

    def _tenant(self, scope: Scope) -> str | None:
        given = []
        for name, value in scope["headers"]:
            lowered = name.lower()
            if lowered == API_KEY_HEADER.encode():
                given.append(value)
            elif lowered == AUTHORIZATION_HEADER.encode() and value.lower().startswith(BEARER_PREFIX.encode()):
                given.append(value[len(BEARER_PREFIX):].strip())
        # compare every candidate with every key, so timing tells neither which header nor which key
        found = None
        for value in given:
            for key, tenant in self._keys:
                if hmac.compare_digest(value, key):
                    found = tenant
        return found
