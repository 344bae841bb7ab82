"""The Starlette app: OpenAI and Anthropic routes over one `Engine`, `/health`, `/metrics`, errors by route.

    app = create_app(Engine.from_pretrained("default"), api_key="secret")
    uvicorn.run(app, host="127.0.0.1", port=8000)

Every refusal is the API's own error body: requests under `/v1/messages` get Anthropic's, the rest
OpenAI's (see `errors`). Unknown paths are 404 in that shape too, and an unexpected failure is a 500
whose message names no request content. Every request field is honoured or refused by name
(see `fields`); the engine's grammar support (`constrained.Grammars`) is shared by all routes.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from local_backend._constants import DEFAULT_MODEL_NAME
from local_backend.engine import Engine
from local_backend.server import anthropic_routes, openai_routes, responses_routes
from local_backend.server._constants import DEFAULT_MAX_QUEUE, HEALTH_PATH
from local_backend.server.auth import ApiKeyMiddleware
from local_backend.server.constrained import Grammars
from local_backend.server.errors import ApiError, ErrorKind, Flavor, error_body, error_response, status_of
from local_backend.server.generation import Backend
from local_backend.server.metrics import CONTENT_TYPE, ServerMetrics

logger = logging.getLogger(__name__)


def create_app(
    engine: Engine,
    *,
    model_name: str | Sequence[str] = DEFAULT_MODEL_NAME,
    api_key: str | Sequence[str] | None = None,
    max_queue: int = DEFAULT_MAX_QUEUE,
    allowed_origins: Sequence[str] = (),
) -> Starlette:
    """An ASGI app serving `engine` as `model_name`; with `api_key`, all but `/health` need a key.

    `model_name` may be several names (vLLM's `--served-model-name`): the first is reported, all
    are accepted, any other is a 404. `allowed_origins` (`"*"` for any) lets browser pages on those
    origins call the API (CORS, preflights included; the key is still checked on the real request).

    `api_key` is one key or several: each key is a tenant whose prefix-cache blocks are kept apart
    from the others' (see `auth`). Beyond the engine's batch plus `max_queue` waiting requests, new
    requests are refused at once. The caller owns the engine (and closes it after the server stops).
    """
    if max_queue < 0:
        raise ValueError(f"max_queue={max_queue} must be >= 0")
    keys = (api_key,) if isinstance(api_key, str) else tuple(api_key or ())
    if not all(isinstance(key, str) and key for key in keys):
        raise ValueError("api_key must be a non-empty string or a list of them; an empty key would let anyone in")
    names = (model_name,) if isinstance(model_name, str) else tuple(model_name)
    if not names or not all(isinstance(name, str) and name for name in names):
        raise ValueError(f"model_name={model_name!r} must be a non-empty string or a list of them")
    backend = Backend(engine, names, max_queue)
    server_metrics = ServerMetrics(engine.stats, backend.admission)
    backend.on_finish = server_metrics.observe
    grammars = Grammars(engine.tokenizer, engine.config.vocab_size, sorted(engine.core.eos))

    async def health(request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def metrics(request: Request) -> Response:
        return Response(server_metrics.exposition(), media_type=CONTENT_TYPE)

    routes = [
        Route(HEALTH_PATH, health, methods=["GET"]),
        Route("/metrics", metrics, methods=["GET"]),
        *openai_routes.routes(backend, grammars),
        *responses_routes.routes(backend, grammars),
        *anthropic_routes.routes(backend, grammars),
    ]
    middleware = [Middleware(ApiKeyMiddleware, api_keys=keys)] if keys else []
    if allowed_origins:  # outermost: a preflight carries no key, and even a 401 needs CORS headers
        middleware.insert(0, Middleware(CORSMiddleware, allow_origins=list(allowed_origins),
                                        allow_methods=["*"], allow_headers=["*"]))  # fmt: skip
    return Starlette(
        routes=routes,
        middleware=middleware,
        exception_handlers={
            ApiError: _api_error,
            HTTPException: _http_error,
            ClientDisconnect: _client_gone,
            Exception: _internal_error,
        },
    )


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
    logger.error("%s %s failed: %s", request.method, request.url.path, type(exc).__name__)
    flavor = Flavor.of_path(request.url.path)
    error = ApiError("internal server error; see the server log", ErrorKind.INTERNAL)
    return JSONResponse(error_body(error, flavor), status_code=status_of(error, flavor))
