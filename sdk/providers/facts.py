"""The shape of one provider's facts: what every provider module of `sdk.providers` fills in.

The steps ask for a provider's facts (`sdk.providers.facts_for`) rather than branch on who it is, so a
new provider is one new module holding one `ProviderFacts`, registered in `sdk.providers.PROVIDERS`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from sdk.call import Provider


@dataclass(frozen=True, slots=True)
class ProviderFacts:
    """What kvwise knows of one provider: where it is served, how telemetry names it, what its cache does.

    `hosts`: the base-URL hosts that are this provider; `client_package`: the client package whose every
    client speaks to it (the `anthropic` clients, Bedrock and Vertex included), None: none.
    `semconv_name`: its `gen_ai.provider.name`, unless its host ends with one of `servers`' suffixes
    (OpenAI-compatible servers with a name of their own). `min_cacheable_tokens(model)`: the shortest
    prefix it caches; `cache_step_tokens`: beyond that, the steps its cache grows in (1: any length);
    `breakpoints_only`: it caches nothing before a breakpoint; `cache_keys`: it takes `prompt_cache_key`
    (and retention) hints; `shortest_retention_seconds`: its shortest documented cache lifetime (None:
    not known); `cache_lifetime(params, policy_ttl)`: how long it keeps a request's prefix (None: not known).
    """

    provider: Provider
    semconv_name: str
    min_cacheable_tokens: Callable[[str], int]
    cache_lifetime: Callable[[Mapping[str, Any], str | None], float | None]
    hosts: tuple[str, ...] = ()
    client_package: str | None = None
    servers: tuple[tuple[str, str], ...] = ()
    cache_step_tokens: int = 1
    breakpoints_only: bool = False
    cache_keys: bool = False
    shortest_retention_seconds: float | None = None

    def __post_init__(self) -> None:
        if self.cache_step_tokens < 1:
            raise ValueError(f"ProviderFacts.cache_step_tokens must be >= 1, got {self.cache_step_tokens!r}")

    def name_for(self, host: str | None) -> str:
        """`gen_ai.provider.name` of a call to `host`: a named server's, else the provider's."""
        return name_by_suffix(host, self.servers) or self.semconv_name


def name_by_suffix(host: str | None, table: tuple[tuple[str, str], ...]) -> str | None:
    """The name `table` gives the first host suffix `host` ends with (None: none, or no host)."""
    if host:
        for suffix, name in table:
            if host.endswith(suffix):
                return name
    return None
