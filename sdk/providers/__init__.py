"""Every provider fact in one room, one module per provider, below every step.

openai             api.openai.com: cache keys, extended retention, explicit breakpoints, 1,024-token minimum
anthropic          every `anthropic` client: breakpoints only, minimums by model series, 5m / 1h lifetimes
openai_compatible  any other OpenAI-API server: caches by prefix by itself; semconv names of known hosts
platforms          Bedrock, Vertex AI, Azure AI: reported under the platform's name
facts              `ProviderFacts`, the shape each provider module fills in

The steps ask here (`provider_for` a client's base URL, `facts_for` a call's provider, `semconv_name`
of a call) rather than branch on hosts or hold a provider's figures. A new provider is a new module with
its `FACTS`, added to `PROVIDERS` (and, for a new API, its adapter in `sdk.adapters`).
"""

from __future__ import annotations

from typing import Final

from sdk.call import Provider
from sdk.providers import anthropic, openai, openai_compatible
from sdk.providers.facts import ProviderFacts
from sdk.providers.platforms import platform_name

PROVIDERS: tuple[ProviderFacts, ...] = (openai.FACTS, anthropic.FACTS, openai_compatible.FACTS)
"""The registered providers: a client's host or package is looked up in this order."""

DEFAULT: Final = openai_compatible.FACTS
"""Who serves a base URL no registered provider claims: an OpenAI-compatible server."""


def facts_for(provider: Provider) -> ProviderFacts:
    """The facts of `provider` (a `Call.provider`)."""
    for facts in PROVIDERS:
        if facts.provider == provider:
            return facts
    raise LookupError(f"no provider module registered for {provider!r} (sdk.providers.PROVIDERS)")


def provider_for(host: str | None, package: str) -> Provider:
    """Who serves a client of `package` ("openai", "anthropic") sending to `host`: the provider every
    client of that package speaks to, else the one `host` is, else `DEFAULT`."""
    for facts in PROVIDERS:
        if facts.client_package == package:
            return facts.provider
    for facts in PROVIDERS:
        if host in facts.hosts:
            return facts.provider
    return DEFAULT.provider


def semconv_name(provider: Provider, host: str | None) -> str:
    """`gen_ai.provider.name` of a call of `provider` to `host`: the cloud platform hosting the model if
    the host is one, else the provider's own (an OpenAI-compatible server's, where it has one)."""
    return platform_name(host) or facts_for(provider).name_for(host)


def min_cacheable_tokens(provider: Provider, model: str) -> int:
    """The shortest prefix `provider` caches for `model`."""
    return facts_for(provider).min_cacheable_tokens(model)


__all__ = ["DEFAULT", "PROVIDERS", "ProviderFacts", "facts_for", "min_cacheable_tokens", "provider_for", "semconv_name"]
