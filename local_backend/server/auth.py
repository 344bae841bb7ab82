"""`--api-key`: every path but `/health` needs a key, as `Authorization: Bearer KEY` or `x-api-key: KEY`.

Either header works on every route (OpenAI clients send the first, Anthropic's the second). The
server may hold several keys; each key is a tenant. A request's tenant id is a hash of its key
(never the key itself), and it salts the request's prefix-cache blocks, so one key can never get a
cache hit, or a faster first token, from another key's prompt. Without keys every request is one
tenant. Comparisons are constant-time (`hmac.compare_digest`, every candidate against every key),
and neither the keys nor the headers are logged.

`/metrics` counts every tenant's work together (prefix-cache hit tokens, prompt tokens, blocks in
use), so it shows a tenant only what is its own: with one key every number is that key's and the
key reads them; with several, only the separate metrics key (`--metrics-key`) does, and a tenant's
key gets 403. Per-tenant numbers were the other choice, but the pool's gauges cannot be split by
tenant, and a scrape is an operator's job, which Prometheus does with one credential.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Sequence
from typing import Final

from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from local_backend.server._constants import HEALTH_PATH, METRICS_PATH, OPENAPI_PATH
from local_backend.server.errors import ApiError, ErrorKind, Flavor, error_response

API_KEY_HEADER: Final = "x-api-key"
AUTHORIZATION_HEADER: Final = "authorization"
BEARER_PREFIX: Final = "bearer "

TENANT_STATE: Final = "kvwise.tenant"
"""Key of the request's tenant id in the ASGI scope's `state`, set by the API-key middleware."""

TENANT_HASH_PERSON: Final = b"kvwise-tenant"
"""blake2b personalisation of the key hash that names a tenant."""

TENANT_ID_BYTES: Final = 16
"""Bytes of that hash: a tenant id is twice as many hex digits."""


def tenant_id(api_key: str) -> str:
    """The tenant of a key: a keyed-purpose blake2b of it, hex (the key cannot be read back from it)."""
    return hashlib.blake2b(api_key.encode(), digest_size=TENANT_ID_BYTES, person=TENANT_HASH_PERSON).hexdigest()


def tenant_of(request: Request) -> str | None:
    """The tenant the key middleware found for this request; None when the server has no keys."""
    tenant: str | None = request.scope.get("state", {}).get(TENANT_STATE)
    return tenant


_OPEN_PATHS = frozenset({HEALTH_PATH, OPENAPI_PATH})
"""Paths that never need a key: the readiness probe and the API's own description (no data in either)."""
_METRICS_READER = "kvwise.metrics"
"""What `_tenant` finds for the metrics key (never a tenant id: those are hex digests)."""


class ApiKeyMiddleware:
    """Pure ASGI middleware (it never buffers a response, so streams pass through untouched).

    `api_keys` guard every route but the open ones (no key is needed when there are none);
    `metrics_key` reads `/metrics` (see the module doc for who else may).
    """

    def __init__(self, app: ASGIApp, api_keys: Sequence[str], metrics_key: str | None = None):
        self._app = app
        self._keys = [(key.encode(), tenant_id(key)) for key in api_keys]
        if metrics_key is not None:
            self._keys.append((metrics_key.encode(), _METRICS_READER))
        self._guards_api = bool(api_keys)
        self._tenant_reads_metrics = len(api_keys) == 1

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in _OPEN_PATHS:
            await self._app(scope, receive, send)
            return
        found = self._tenant(scope)
        if scope["path"] == METRICS_PATH:
            allowed = found == _METRICS_READER or (found is not None and self._tenant_reads_metrics)
            if allowed:
                await self._app(scope, receive, send)
                return
            refusal = (
                ApiError(
                    "/metrics counts every tenant's work: it needs the metrics key (--metrics-key)", ErrorKind.FORBIDDEN
                )
                if found is not None
                else _missing_key()
            )
            await error_response(refusal, Flavor.OPENAI)(scope, receive, send)
            return
        if not self._guards_api:
            await self._app(scope, receive, send)
            return
        if found is not None and found != _METRICS_READER:
            scope.setdefault("state", {})[TENANT_STATE] = found
            await self._app(scope, receive, send)
            return
        await error_response(_missing_key(), Flavor.of_path(scope["path"]))(scope, receive, send)

    def _tenant(self, scope: Scope) -> str | None:
        given = []
        for name, value in scope["headers"]:
            lowered = name.lower()
            if lowered == API_KEY_HEADER.encode():
                given.append(value)
            elif lowered == AUTHORIZATION_HEADER.encode() and value.lower().startswith(BEARER_PREFIX.encode()):
                given.append(value[len(BEARER_PREFIX) :].strip())
        # compare every candidate with every key, so timing tells neither which header nor which key
        found = None
        for value in given:
            for key, tenant in self._keys:
                if hmac.compare_digest(value, key):
                    found = tenant
        return found


def _missing_key() -> ApiError:
    return ApiError(
        "invalid or missing API key: send Authorization: Bearer KEY or x-api-key: KEY", ErrorKind.UNAUTHORIZED
    )
