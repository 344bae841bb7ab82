"""Error answers in each API's own shape, so the real clients raise their own exception types.

OpenAI: `{"error": {"message", "type", "param", "code"}}` with an `x-request-id` header.
Anthropic: `{"type": "error", "error": {"type", "message"}, "request_id"}` with a `request-id`
header. Both clients map the status code to the class (`429` -> `RateLimitError`, `529` ->
anthropic `OverloadedError`, other `5xx` -> `InternalServerError`).
"""

from __future__ import annotations

import enum
import uuid
from dataclasses import dataclass, field
from typing import Any


class Flavour(enum.Enum):
    """Which API's conventions an answer follows."""

    OPENAI = "openai"
    ANTHROPIC = "anthropic"


# 4xx answers are `invalid_request_error` unless listed; 5xx are `server_error`.
_OPENAI_TYPES = {429: "requests"}
_OPENAI_CODES = {401: "invalid_api_key", 404: "not_found", 429: "rate_limit_exceeded"}
_ANTHROPIC_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    409: "conflict_error",
    413: "request_too_large",
    429: "rate_limit_error",
    504: "timeout_error",
    529: "overloaded_error",
}
_MESSAGES = {
    400: "Invalid request.",
    401: "Invalid API key.",
    404: "Not found.",
    429: "Rate limit reached. Please try again later.",
    529: "Overloaded.",
}


@dataclass(eq=False)
class SimulatedError(Exception):
    """An error answer: raise it anywhere while handling a request to send it to the client.

    `param` names the offending request field (OpenAI bodies carry it); `headers` are added to the
    answer (e.g. `retry-after`).
    """

    status: int
    message: str = ""
    param: str | None = None
    error_type: str | None = None
    headers: dict[str, str] = field(default_factory=dict)

    def body(self, flavour: Flavour, request_id: str) -> dict[str, Any]:
        message = self.message or _MESSAGES.get(self.status, f"Simulated error {self.status}.")
        if flavour is Flavour.ANTHROPIC:
            kind = self.error_type or _ANTHROPIC_TYPES.get(self.status, "api_error")
            return {"type": "error", "error": {"type": kind, "message": message}, "request_id": request_id}
        default = "server_error" if self.status >= 500 else "invalid_request_error"
        kind = self.error_type or _OPENAI_TYPES.get(self.status, default)
        code = _OPENAI_CODES.get(self.status)
        return {"error": {"message": message, "type": kind, "param": self.param, "code": code}}


def request_id_header(flavour: Flavour) -> tuple[str, str]:
    """A fresh request-id header as the API names it."""
    if flavour is Flavour.ANTHROPIC:
        return "request-id", f"req_{uuid.uuid4().hex[:24]}"
    return "x-request-id", f"req_{uuid.uuid4().hex}"
