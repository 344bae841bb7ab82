"""API errors: one exception, rendered as OpenAI's or Anthropic's own error body, chosen by route.

    ApiError (an `Exception`) carries a wire-neutral `ErrorKind`; `render(error, flavor)` maps the
    kind to that API's status code and error type:

    kind            OpenAI                               Anthropic
    BAD_REQUEST     400 invalid_request_error            400 invalid_request_error
    UNAUTHORIZED    401 invalid_request_error/invalid_api_key   401 authentication_error
    FORBIDDEN       403 invalid_request_error/forbidden  403 permission_error
    NOT_FOUND       404 invalid_request_error            404 not_found_error
    TOO_LARGE       413 invalid_request_error            413 request_too_large
    UNSUPPORTED_MEDIA_TYPE  415 invalid_request_error    415 invalid_request_error
    REQUEST_TIMEOUT 408 invalid_request_error            408 invalid_request_error
    HEADERS_TOO_LARGE  431 invalid_request_error         431 invalid_request_error
    OVERLOADED      429 rate_limit_error                 529 overloaded_error
    INTERNAL        500 server_error                     500 api_error

Both clients map the status to their own exception class (429 `RateLimitError`, 529
`OverloadedError`/`InternalServerError`), so a caller's retry policy sees what a hosted API would send.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, Final

from starlette.responses import JSONResponse

ANTHROPIC_PATH_PREFIX: Final = "/v1/messages"
"""Requests under this path get Anthropic error bodies; every other path gets OpenAI's."""


class Flavor(enum.Enum):
    """Which API's error body a route answers with."""

    OPENAI = "openai"
    ANTHROPIC = "anthropic"

    @classmethod
    def of_path(cls, path: str) -> Flavor:
        return cls.ANTHROPIC if path.startswith(ANTHROPIC_PATH_PREFIX) else cls.OPENAI


class ErrorKind(enum.Enum):
    BAD_REQUEST = "bad_request"
    UNAUTHORIZED = "unauthorized"
    FORBIDDEN = "forbidden"
    NOT_FOUND = "not_found"
    TOO_LARGE = "too_large"
    UNSUPPORTED_MEDIA_TYPE = "unsupported_media_type"
    REQUEST_TIMEOUT = "request_timeout"
    HEADERS_TOO_LARGE = "headers_too_large"
    OVERLOADED = "overloaded"
    INTERNAL = "internal"


_OPENAI: dict[ErrorKind, tuple[int, str, str | None]] = {
    ErrorKind.BAD_REQUEST: (400, "invalid_request_error", None),
    ErrorKind.UNAUTHORIZED: (401, "invalid_request_error", "invalid_api_key"),
    ErrorKind.FORBIDDEN: (403, "invalid_request_error", "forbidden"),
    ErrorKind.NOT_FOUND: (404, "invalid_request_error", "not_found"),
    ErrorKind.TOO_LARGE: (413, "invalid_request_error", "request_too_large"),
    ErrorKind.UNSUPPORTED_MEDIA_TYPE: (415, "invalid_request_error", "unsupported_media_type"),
    ErrorKind.REQUEST_TIMEOUT: (408, "invalid_request_error", "request_timeout"),
    ErrorKind.HEADERS_TOO_LARGE: (431, "invalid_request_error", "request_header_fields_too_large"),
    ErrorKind.OVERLOADED: (429, "rate_limit_error", "rate_limit_exceeded"),
    ErrorKind.INTERNAL: (500, "server_error", None),
}
_ANTHROPIC: dict[ErrorKind, tuple[int, str]] = {
    ErrorKind.BAD_REQUEST: (400, "invalid_request_error"),
    ErrorKind.UNAUTHORIZED: (401, "authentication_error"),
    ErrorKind.FORBIDDEN: (403, "permission_error"),
    ErrorKind.NOT_FOUND: (404, "not_found_error"),
    ErrorKind.TOO_LARGE: (413, "request_too_large"),
    ErrorKind.UNSUPPORTED_MEDIA_TYPE: (415, "invalid_request_error"),
    ErrorKind.REQUEST_TIMEOUT: (408, "invalid_request_error"),
    ErrorKind.HEADERS_TOO_LARGE: (431, "invalid_request_error"),
    ErrorKind.OVERLOADED: (529, "overloaded_error"),
    ErrorKind.INTERNAL: (500, "api_error"),
}


@dataclass(eq=False)
class ApiError(Exception):
    """A request the server refuses or could not serve; `message` says what, with which value."""

    message: str
    kind: ErrorKind = ErrorKind.BAD_REQUEST
    param: str | None = None
    code: str | None = None

    def __str__(self) -> str:
        return self.message


def status_of(error: ApiError, flavor: Flavor) -> int:
    return (_OPENAI if flavor is Flavor.OPENAI else _ANTHROPIC)[error.kind][0]


def error_body(error: ApiError, flavor: Flavor) -> dict[str, Any]:
    """`{"error": {message, type, param, code}}` (OpenAI) or `{"type": "error", "error": {type, message}}`."""
    message = _printable(error.message)
    if flavor is Flavor.ANTHROPIC:
        _, kind = _ANTHROPIC[error.kind]
        return {"type": "error", "error": {"type": kind, "message": message}}
    _, kind, code = _OPENAI[error.kind]
    param = None if error.param is None else _printable(error.param)
    return {"error": {"message": message, "type": kind, "param": param, "code": error.code or code}}


def _printable(text: str) -> str:
    """`text` with lone surrogates escaped: a message quoting a caller's odd key must still encode as UTF-8."""
    return text.encode("utf-8", "backslashreplace").decode()


def error_response(error: ApiError, flavor: Flavor) -> JSONResponse:
    return JSONResponse(error_body(error, flavor), status_code=status_of(error, flavor))
