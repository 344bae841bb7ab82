"""`sdk.lint`: what would cost cache hits or decode tokens in a call, found without sending it."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from sdk.adapters import adapter_for, map_descriptions, map_text
from sdk.cache.hints import estimate_tokens
from sdk.cache.provider_facts import min_cacheable_tokens
from sdk.call import Api, Provider
from sdk.prompt.canonical import tool_name
from sdk.prompt.moving import text_leaves
from sdk.prompt.volatile import find_volatile

_ADVICE = {
    "system": "keep it out of the system prompt (sdk.wrap moves what changes, with Policy(volatile='move'))",
    "tools": "take it out of the tool definition (sdk.wrap never rewrites tools)",
}
_APIS = {"openai": Api.CHAT, "openai_chat": Api.CHAT, "openai_responses": Api.RESPONSES, "anthropic": Api.MESSAGES}


class FindingCode(StrEnum):
    VOLATILE_IN_PREFIX = "volatile_in_prefix"
    UNSTABLE_TOOL_ORDER = "unstable_tool_order"
    PREFIX_BELOW_MINIMUM = "prefix_below_minimum"
    MISSING_MAX_TOKENS = "missing_max_tokens"


@dataclass(frozen=True, slots=True)
class Finding:
    """One problem: a code, where it is, and what to do."""

    code: FindingCode
    where: str
    message: str


def lint(call_kwargs: dict[str, Any], provider: str = "openai") -> list[Finding]:
    """Findings for the native kwargs of one call; `provider` is "openai", "openai_responses" or "anthropic".

    >>> [f.code for f in sdk.lint({"model": "m", "messages": [...]}, provider="openai")]
    ['missing_max_tokens']
    """
    if provider not in _APIS:
        raise ValueError(f"lint: provider must be one of {sorted(_APIS)}, got {provider!r}")
    api = _APIS[provider]
    adapter = adapter_for(api)
    call = adapter.to_call(dict(call_kwargs), Provider.ANTHROPIC if api is Api.MESSAGES else Provider.OPENAI)
    findings: list[Finding] = []
    for where, items, walk in (("tools", call.tools, map_descriptions), ("system", call.system, map_text)):
        for index, item in enumerate(items):
            for match in (m for text in text_leaves([item], walk) for m in find_volatile(text)):
                findings.append(
                    Finding(
                        FindingCode.VOLATILE_IN_PREFIX,
                        f"{where}[{index}]",
                        f"{match.label} {match.text!r} looks volatile: if it changes between calls, it breaks "
                        f"the prompt cache from here on; {_ADVICE[where]}",
                    )
                )
    names = [tool_name(tool) for tool in call.tools]
    if names != sorted(names):
        findings.append(
            Finding(
                FindingCode.UNSTABLE_TOOL_ORDER,
                "tools",
                "tools are not sorted by name: any reordering breaks the cache",
            )
        )
    minimum = min_cacheable_tokens(call.provider, call.model)
    prefix = (
        estimate_tokens(call.tools) + estimate_tokens(call.system) + estimate_tokens(call.messages[: call.history_end])
    )
    if prefix < minimum:
        findings.append(
            Finding(
                FindingCode.PREFIX_BELOW_MINIMUM,
                "prefix",
                f"the stable prefix is about {prefix} tokens, below the {minimum}-token minimum the provider caches",
            )
        )
    if not any(name in call.params for name in adapter.max_tokens_params):
        findings.append(
            Finding(
                FindingCode.MISSING_MAX_TOKENS,
                "params",
                f"no {' / '.join(adapter.max_tokens_params)}: decode is the expensive phase, cap it",
            )
        )
    return findings
