"""Every other server of the OpenAI API (vLLM, SGLang, llama.cpp, the local backend, hosted ones such as
DeepSeek or Groq): they cache by prefix by themselves and ignore OpenAI's cache keys, so only the
canonical order matters; their block caches read at least what OpenAI's would, so kvwise expects as
much. A server whose host has a semconv provider name is reported under it, others as `openai`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from sdk.call import Provider
from sdk.providers import openai
from sdk.providers.facts import ProviderFacts
from sdk.semconv import ProviderName

KNOWN_SERVERS: Final = (
    (".openai.azure.com", ProviderName.AZURE_AI_OPENAI.value),
    ("api.deepseek.com", ProviderName.DEEPSEEK.value),
    ("generativelanguage.googleapis.com", ProviderName.GCP_GEMINI.value),
    ("api.groq.com", ProviderName.GROQ.value),
    ("api.mistral.ai", ProviderName.MISTRAL_AI.value),
    ("api.moonshot.ai", ProviderName.MOONSHOT_AI.value),
    ("api.perplexity.ai", ProviderName.PERPLEXITY.value),
    ("api.x.ai", ProviderName.X_AI.value),
)
"""Host suffixes of OpenAI-compatible servers with a semconv provider name."""


def cache_lifetime(params: Mapping[str, Any], policy_ttl: str | None) -> float | None:
    """Not known: each server keeps its blocks as long as its memory allows."""
    return None


FACTS: Final = ProviderFacts(
    provider=Provider.OPENAI_COMPATIBLE,
    semconv_name=ProviderName.OPENAI.value,
    min_cacheable_tokens=openai.min_cacheable_tokens,
    cache_lifetime=cache_lifetime,
    servers=KNOWN_SERVERS,
    cache_step_tokens=openai.CACHE_STEP_TOKENS,
)
