"""The clouds that host either provider's models (Bedrock, Vertex AI, Azure AI Inference / Foundry): a call to
one is reported under the platform's name, whatever API it speaks; its cache is its provider's."""

from __future__ import annotations

from typing import Final

from sdk.providers.facts import name_by_suffix
from sdk.semconv import ProviderName

KNOWN_PLATFORMS: Final = (
    (".amazonaws.com", ProviderName.AWS_BEDROCK.value),
    ("aiplatform.googleapis.com", ProviderName.GCP_VERTEX_AI.value),
    (".services.ai.azure.com", ProviderName.AZURE_AI_INFERENCE.value),
    (".models.ai.azure.com", ProviderName.AZURE_AI_INFERENCE.value),
    (".inference.ai.azure.com", ProviderName.AZURE_AI_INFERENCE.value),
)
"""Host suffixes of the platforms and their `gen_ai.provider.name`."""


def platform_name(host: str | None) -> str | None:
    """The `gen_ai.provider.name` of the platform `host` belongs to (None: no known platform)."""
    return name_by_suffix(host, KNOWN_PLATFORMS)
