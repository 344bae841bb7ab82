"""The Starlette app: OpenAI and Anthropic routes over one `Engine`, `/health`, `/metrics`, errors by route.

    app = create_app(Engine.from_pretrained("default"), api_key="secret")
    uvicorn.run(app, host="127.0.0.1", port=8000)

Every refusal is the API's own error body: requests under `/v1/messages` get Anthropic's, the rest
OpenAI's (see `errors`). Unknown paths are 404 in that shape too, and an unexpected failure is a 500
whose message names no request content; its log entry keeps the innermost `MAX_LOGGED_FRAMES` frames
(a server whose stderr was an undrained pipe once blocked its event loop writing a deep recursion's
whole traceback, and stopped answering everyone). Every request field is honoured or refused by name
(see `fields`), on one path: `bounds.read_json`, then the endpoint's typed request (`requests`),
then the engine's `SamplingParams` (`sampling`). The routes are module-level handlers that find the
app's `Backend` (engine, model names, admission queue, grammars) in its state. `GET /openapi.json`
describes the routes (see `openapi`).
"""

from __future__ import annotations

import contextlib
import logging
import traceback
from collections.abc import Sequence
from typing import Final

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from local_backend._constants import DEFAULT_MODEL_NAME
from local_backend.engine.engine import Engine
from local_backend.server import anthropic_routes, openai_routes, openapi, responses_routes
from local_backend.server._constants import (
    DEFAULT_MAX_QUEUE,
    HEALTH_PATH,
    LOOPBACK_HOSTS,
    MAX_LOGGED_FRAMES,
    METRICS_PATH,
    OPENAPI_PATH,
)
from local_backend.server.auth import ApiKeyMiddleware
from local_backend.server.browser_guard import BrowserGuard
from local_backend.server.errors import ApiError, ErrorKind, Flavor, error_body, error_response, status_of
from local_backend.server.generation import Backend, closing_generations
from local_backend.server.metrics import CONTENT_TYPE, ServerMetrics

logger = logging.getLogger(__name__)


def create_app(
    engine: Engine,
    *,
    model_name: str | Sequence[str] = DEFAULT_MODEL_NAME,
    api_key: str | Sequence[str] | None = None,
    metrics_key: str | None = None,
    max_queue: int = DEFAULT_MAX_QUEUE,
    allowed_origins: Sequence[str] = (),
    allowed_hosts: Sequence[str] | None = None,
) -> Starlette:
    """An ASGI app serving `engine` as `model_name`; with `api_key`, all but `/health` need a key.

    `model_name` may be several names (vLLM's `--served-model-name`): the first is reported, all
    are accepted, any other is a 404. `allowed_origins` (`"*"` for any) lets browser pages on those
    origins call the API (CORS, preflights included; the key is still checked on the real request).

    `api_key` is one key or several: each key is a tenant whose prefix-cache blocks are kept apart
    from the others' (see `auth`). With several keys `/metrics` needs `metrics_key`, which reads
    nothing else (with one key, that key reads it too; with none, it is open unless `metrics_key` is
    given). Beyond the engine's batch plus `max_queue` waiting requests, new
    requests are refused at once. The caller owns the engine (and closes it after the server stops).
    """
    if max_queue < 0:
        raise ValueError(f"max_queue={max_queue} must be >= 0")
    keys = (api_key,) if isinstance(api_key, str) else tuple(api_key or ())
    if not all(isinstance(key, str) and key for key in keys):
        raise ValueError("api_key must be a non-empty string or a list of them; an empty key would let anyone in")
    if metrics_key is not None and (not isinstance(metrics_key, str) or not metrics_key or metrics_key in keys):
        raise ValueError("metrics_key must be a non-empty string that is not also an api_key")
    names = (model_name,) if isinstance(model_name, str) else tuple(model_name)
    if not names or not all(isinstance(name, str) and name for name in names):
        raise ValueError(f"model_name={model_name!r} must be a non-empty string or a list of them")
    backend = Backend(engine, names, max_queue)
    server_metrics = ServerMetrics(engine.stats, backend.admission)
    backend.on_finish = server_metrics.observe
    guarded = bool(keys) or metrics_key is not None
    middleware = [Middleware(ApiKeyMiddleware, api_keys=keys, metrics_key=metrics_key)] if guarded else []
    hosts = allowed_hosts if allowed_hosts is not None else None if keys else sorted(LOOPBACK_HOSTS)
    middleware.insert(0, Middleware(BrowserGuard, allowed_hosts=hosts, allowed_origins=allowed_origins))
    if allowed_origins:  # outermost: a preflight carries no key, and even a 401 needs CORS headers
        middleware.insert(
            0, Middleware(CORSMiddleware, allow_origins=list(allowed_origins), allow_methods=["*"], allow_headers=["*"])
        )
    app = _App(
        routes=[*_OWN_ROUTES, *_API_ROUTES],
        middleware=middleware,
        exception_handlers={
            ApiError: _api_error,
            HTTPException: _http_error,
            ClientDisconnect: _client_gone,
            Exception: _internal_error,
        },
    )
    app.state.backend, app.state.metrics = backend, server_metrics
    app.state.openapi = openapi.document(_API_ROUTES, names[0])
    return app


async def _health(request: Request) -> Response:
    return JSONResponse({"status": "ok"})


async def _metrics(request: Request) -> Response:
    server_metrics: ServerMetrics = request.app.state.metrics
    return Response(server_metrics.exposition(), media_type=CONTENT_TYPE)


async def _openapi(request: Request) -> Response:
    return JSONResponse(request.app.state.openapi)


_API_ROUTES: Final = (*openai_routes.ROUTES, *responses_routes.ROUTES, *anthropic_routes.ROUTES)
_OWN_ROUTES: Final = (
    Route(HEALTH_PATH, _health, methods=["GET"]),
    Route(METRICS_PATH, _metrics, methods=["GET"]),
    Route(OPENAPI_PATH, _openapi, methods=["GET"]),
)


class _App(Starlette):
    """Starlette, whose failures end here: Starlette re-raises each after `_internal_error` has
    logged it and sent its 500, and uvicorn would log it again with every frame and its message.
    Every generation a request started is closed, and its admission slot freed, when its call ends."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        with closing_generations(scope), contextlib.suppress(Exception):
            await super().__call__(scope, receive, send)


async def _api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return error_response(exc, Flavor.of_path(request.url.path))


async def _http_error(request: Request, exc: Exception) -> Response:
    """Starlette's own 404 / 405, in the route's error shape and with its status."""
    assert isinstance(exc, HTTPException)
    kind = ErrorKind.NOT_FOUND if exc.status_code == 404 else ErrorKind.BAD_REQUEST
    error = ApiError(f"{request.method} {request.url.path}: {exc.detail}", kind)
    return JSONResponse(error_body(error, Flavor.of_path(request.url.path)), status_code=exc.status_code)


async def _client_gone(request: Request, exc: Exception) -> Response:
    return Response(status_code=204)  # hung up while sending its body: nobody to answer


async def _internal_error(request: Request, exc: Exception) -> Response:
    """A 500, logged as the exception's type and innermost frames, never its message (it may quote the request)."""
    frames = traceback.format_list(traceback.extract_tb(exc.__traceback__, limit=-MAX_LOGGED_FRAMES))
    logger.error(
        "%s %s failed: %s (innermost %d frames)\n%s",
        request.method,
        request.url.path,
        type(exc).__name__,
        MAX_LOGGED_FRAMES,
        "".join(frames),
    )
    flavor = Flavor.of_path(request.url.path)
    error = ApiError("internal server error; see the server log", ErrorKind.INTERNAL)
    return JSONResponse(error_body(error, flavor), status_code=status_of(error, flavor))
