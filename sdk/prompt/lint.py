"""`sdk.lint`: what would cost cache hits or decode tokens in a call, found without sending it."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from sdk.adapters import adapter_for, map_descriptions, map_text
from sdk.call import Api, Call, Provider
from sdk.memory.place import place_for
from sdk.policy import Policy
from sdk.prompt.canonical import tool_name
from sdk.prompt.families import FamilyMemory
from sdk.prompt.moving import first_user_turn, text_leaves
from sdk.prompt.volatile import find_volatile, mask_volatile
from sdk.providers import min_cacheable_tokens
from sdk.tokens import estimate_tokens

_ADVICE = {
    "system": "keep it out of the system prompt (sdk.wrap moves what changes, with Policy(volatile='move'))",
    "tools": "take it out of the tool definition (sdk.wrap never rewrites tools)",
}
_APIS = {"openai": Api.CHAT, "openai_chat": Api.CHAT, "openai_responses": Api.RESPONSES, "anthropic": Api.MESSAGES}


class FindingCode(StrEnum):
    VOLATILE_IN_PREFIX = "volatile_in_prefix"
    CHANGING_LINE = "changing_line"
    UNSTABLE_TOOL_ORDER = "unstable_tool_order"
    PREFIX_BELOW_MINIMUM = "prefix_below_minimum"
    MISSING_MAX_TOKENS = "missing_max_tokens"


@dataclass(frozen=True, slots=True)
class Finding:
    """One problem: a code, where it is, and what to do."""

    code: FindingCode
    where: str
    message: str


def lint(
    call_kwargs: dict[str, Any], provider: str = "openai", *, client: Any = None, state: str | None = None
) -> list[Finding]:
    """Findings for the native kwargs of one call; `provider` is "openai", "openai_responses" or "anthropic".

    With `client` (the client the call goes through, bare or wrapped) it also reads what wrapped
    calls learnt in the store `state` names (as `sdk.wrap` does: else $KVWISE_STATE_URL, else the
    default SQLite file): each system line the prompt's family has shown changing, which breaks the
    prefix where it stands, and whether `sdk.wrap` can move it (`changing_line`).

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
    if client is not None:
        store = place_for(client, state, Policy().fanout_wait_seconds).store  # where `sdk.wrap` keeps its memories
        findings += _changing_lines(call, FamilyMemory(store))
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


def _changing_lines(call: Call, families: FamilyMemory) -> list[Finding]:
    """The system lines `call`'s family has shown changing (`FamilyMemory.changing_lines`)."""
    texts = text_leaves(call.system)
    tools = [mask_volatile(text) for text in text_leaves(call.tools, map_descriptions)]
    movable = first_user_turn(call) is not None
    findings: list[Finding] = []
    for index, (text, lines) in enumerate(
        zip(texts, families.changing_lines([mask_volatile(t) for t in texts], tools, call.model))
    ):
        starts = [0]
        for line in text.split("\n"):
            starts.append(starts[-1] + len(line.encode()) + 1)
        for number in sorted(lines):
            line = text.split("\n")[number]
            fate = (
                "sdk.wrap moves it to the context note"
                if movable
                else "sdk.wrap cannot move it: the call has no user turn"
            )
            findings.append(
                Finding(
                    FindingCode.CHANGING_LINE,
                    f"system[{index}]",
                    f"line {number + 1} {line.strip()[:80]!r} changed between calls of this prompt family: sent as it "
                    f"is, it breaks the prefix from byte {starts[number]}; {fate}",
                )
            )
    return findings
