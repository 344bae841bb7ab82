"""The report's findings in plain words: what the numbers say to change, worst first."""

from __future__ import annotations

from collections.abc import Sequence

from sdk.report.misses import MissRow
from sdk.report.numbers import ConversationStats, ModelCost, ModelDecode, PrefillFit

ADVICE = {
    "volatile_content": (
        "a value that changes every call (a timestamp, an id); move it after the stable prefix or let kvwise move it"
    ),
    "system_changed": "the system prompt changed; keep it fixed and put per-call text in the last user turn",
    "tool_reorder": "the tools came in another order; keep their order fixed (kvwise canonicalisation can sort them)",
    "tool_schema_changed": "a tool's schema changed; keep tool definitions fixed within a session",
    "tools_changed": "the tool set changed; send the same tools on every call and restrict them with tool_choice",
    "history_rewritten": "earlier turns were edited or trimmed; only append to the history",
    "unstable_serialisation": "the same content serialised differently; build the request from stable data",
    "model_changed": "the model changed; each model has its own cache",
    "tool_choice_changed": "tool_choice changed; it is part of the cached prefix",
    "thinking_changed": "the thinking settings changed; they are part of the cached prefix",
    "ttl_expired": "calls came further apart than the cache lives; call sooner or ask for a longer TTL",
}
"""What to do about each `sdk.cache.fingerprint.BreakCause`."""

MISS_ADVICE = {
    "evicted": "the provider dropped a prefix it should have kept (eviction, or a replica that never saw it)",
    "breakpoint_ignored": (
        "the cache_control breakpoints were not honoured; check for a gateway or proxy that strips them"
    ),
    "lifetime_passed": "the calls came further apart than the cache lives; call sooner or ask for a longer TTL",
    "under_minimum": (
        "the shared prefix is at the provider's minimum cacheable length; lengthen it or accept the misses"
    ),
    "other_endpoint": "the prefix was cached under another base URL or key; send a prompt family through one",
}
"""What each `sdk.semconv.MissCause` means for the user."""


def findings(
    conversations: Sequence[ConversationStats],
    costs: Sequence[ModelCost],
    decode: Sequence[ModelDecode],
    fit: PrefillFit | None,
    misses: Sequence[MissRow] = (),
) -> list[str]:
    """Sentences a user can act on, from the table's numbers."""
    found = []
    for row in misses:
        whose = "the provider missed" if row.by_provider else "kvwise expected but could not get"
        found.append(
            f"{whose} {row.tokens} cached tokens (${row.usd:.4f} paid uncached) on {row.calls} call(s), "
            f"`{row.cause}`: {MISS_ADVICE.get(row.cause, 'see the spans kvwise.cache.* attributes')}."
        )
    for stats in conversations:
        if stats.top_cause is not None:
            where = f" in {stats.top_break_at}" if stats.top_break_at else ""
            advice = ADVICE.get(stats.top_cause, "see the spans' kvwise.prefix.* attributes")
            found.append(
                f"conversation {stats.conversation} broke its cache {stats.top_cause_count} times on "
                f"`{stats.top_cause}`{where}: {advice}."
            )
    for spend in costs:
        if spend.cost.total_usd:
            found.append(
                f"{spend.model}: decode (output) is {spend.decode_share:.0%} of ${spend.cost.total_usd:.4f} spent; "
                f"cache reads saved ${spend.cost.saved_usd:.4f}."
            )
    for model in decode:
        if model.draft_acceptance is not None:
            speed = f" at {model.tokens_per_s:.0f} tokens/s (median)" if model.tokens_per_s else ""
            found.append(
                f"{model.model}: the server's speculative decoding kept {model.draft_acceptance:.0%} of its drafted "
                f"tokens; decode ran{speed or ' (no streamed call timed it)'}."
            )
        if model.guard_cuts:
            found.append(
                f"{model.model}: the loop guard cut {model.guard_cuts} runaway answer(s), "
                f"saving {model.guard_tokens_saved} output tokens."
            )
    if fit is not None:
        found.append(
            f"prefill costs {fit.seconds_per_1k * 1000:.0f} ms per 1k uncached input tokens "
            f"(fitted over {fit.points} streamed calls): "
            "a TTFT spike on a long uncached prompt is the prompt, not the model."
        )
    return found
