"""Cloud platforms' paths for the Messages API, mapped onto the simulator's own.

Bedrock (`AnthropicBedrock`): `POST /model/{model}/invoke` (its streamed twin speaks AWS event-stream,
which the simulator does not). Vertex (`AnthropicVertex`): `POST .../models/{model}:rawPredict` and
`:streamRawPredict` (SSE), and `.../models/count-tokens:rawPredict`. The model travels in the path;
the body carries `anthropic_version` instead. Azure OpenAI (`AzureOpenAI`): `.../deployments/{model}/...`
is the OpenAI path with the deployment segment.
"""

from __future__ import annotations

import json
import re
from urllib.parse import unquote

_BEDROCK = re.compile(r"^/model/(?P<model>[^/]+)/invoke$")
_VERTEX = re.compile(
    r"^/projects/[^/]+/locations/[^/]+/publishers/anthropic/models/(?P<model>[^/:]+):(?:stream)?rawPredict$", re.I
)
MESSAGES = "/v1/messages"
COUNT_TOKENS = "/v1/messages/count_tokens"
_AZURE = re.compile(r"^(?P<base>.*)/deployments/[^/]+(?P<rest>/.+)$")


def route(path: str, raw: bytes) -> tuple[str, bytes]:
    """The simulator path and body for a platform request (others unchanged)."""
    if (azure := _AZURE.match(path)) is not None:
        return azure["base"] + azure["rest"], raw
    match = _BEDROCK.match(path) or _VERTEX.match(path)
    if match is None:
        return path, raw
    model = unquote(match["model"])
    if model == "count-tokens":
        return COUNT_TOKENS, raw
    body = json.loads(raw)
    body.pop("anthropic_version", None)
    return MESSAGES, json.dumps({**body, "model": model}).encode()
