"""Endpoints that answer at once, without decoding: token counting and batch creation.

`POST /v1/messages/count_tokens`: a Messages request without the output parameters (`max_tokens`,
`stop_sequences`, `stream`, `temperature`, ... are refused, as the API does); answers
`{"input_tokens": N}`, the simulator's token count of the prompt.
`POST /v1/messages/batches`: `{"requests": [{"custom_id", "params"}]}`, each `params` checked as a
`/v1/messages` request (a 400 names the first bad one); answers a `message_batch` in progress.
`POST /v1/responses/input_tokens`: a Responses request; answers `{"object": "response.input_tokens",
"input_tokens": N}`. None of them reads or writes the prompt cache.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .anthropic_messages import MessagesApi
from .errors import SimulatedError
from .openai_responses import ResponsesApi
from .wire import new_id

_OUTPUT_PARAMS = frozenset(
    {"max_tokens", "stop_sequences", "stream", "temperature", "top_p", "top_k", "metadata", "service_tier"}
)
_TIMESTAMP = "2026-01-01T00:00:00Z"


def count_tokens(body: dict[str, Any]) -> dict[str, Any]:
    refused = sorted(_OUTPUT_PARAMS & body.keys())
    if refused:
        raise SimulatedError(400, f"{refused[0]}: Extra inputs are not permitted", param=refused[0])
    job = MessagesApi().parse({**body, "max_tokens": 1})
    return {"input_tokens": len(job.prompt)}


def count_input_tokens(body: dict[str, Any]) -> dict[str, Any]:
    return {"object": "response.input_tokens", "input_tokens": len(ResponsesApi().parse(body).prompt)}


def create_batch(body: dict[str, Any]) -> dict[str, Any]:
    requests = body.get("requests")
    if not isinstance(requests, list) or not requests:
        raise SimulatedError(400, "requests: a non-empty list is required", param="requests")
    for request in requests:
        try:
            MessagesApi().parse(request["params"])
        except SimulatedError as error:
            raise SimulatedError(400, f"requests[{request.get('custom_id')}].params: {error.message}") from error
    return {
        "id": new_id("msgbatch_"),
        "type": "message_batch",
        "processing_status": "in_progress",
        "request_counts": {"processing": len(requests), "succeeded": 0, "errored": 0, "canceled": 0, "expired": 0},
        "created_at": _TIMESTAMP,
        "expires_at": _TIMESTAMP,
        "ended_at": None,
        "archived_at": None,
        "cancel_initiated_at": None,
        "results_url": None,
    }


ROUTES: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "/v1/messages/count_tokens": count_tokens,
    "/v1/messages/batches": create_batch,
    "/v1/responses/input_tokens": count_input_tokens,
}
