"""Which calls reason before they answer, and within what budget.

Reasoning (OpenAI o-series and gpt-5 models, Anthropic extended or adaptive thinking) is decoded
into the same output limit as the answer: `max_completion_tokens` / `max_output_tokens` count the
reasoning tokens, and Anthropic's `max_tokens` must exceed `thinking.budget_tokens`. A cap sized
for the answer alone can be spent on reasoning and come back empty, so the decode limits read this
first (see `sdk.decode.limits`). It sits at the SDK's root: the adapters read a call's reasoning
from its kwargs, the decode limits act on it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# Model series that reason by default on the OpenAI APIs: OpenAI's o-series and gpt-5 (with its
# point releases), and the open reasoning models OpenAI-compatible servers serve (gpt-oss,
# DeepSeek-R1, QwQ), which also spend the output limit on reasoning. A caller's
# `reasoning_effort="none"` turns reasoning off on those that allow it. The series' names may follow
# a provider's prefix: a router's `openai/o3`, Bedrock's `us.openai.gpt-5.6-luna` and
# `openai.gpt-oss-120b-1:0`, a gateway's `azure:o4-mini`.
OPENAI_REASONING_MODELS = re.compile(
    r"(?:^|[/.:])(?:o\d|gpt-5|gpt-oss)|deepseek-r1|deepseek-reasoner|qwq", re.IGNORECASE
)
# Anthropic models that think adaptively even when `thinking` is omitted (they refuse "disabled"):
# Mythos (Preview, 5, 5.x) and Fable 5.x, per Anthropic's adaptive-thinking docs, 2026.
ANTHROPIC_ALWAYS_THINKING = re.compile(r"claude-(?:mythos|fable)")
_NO_EFFORT = "none"
_ANTHROPIC_UNBUDGETED = ("adaptive", "between_tools")


@dataclass(frozen=True, slots=True)
class Reasoning:
    """A call that reasons: `budget` is the caller's thinking budget, None when the model decides."""

    budget: int | None = None


def openai_reasoning(model: str, effort: Any) -> Reasoning | None:
    """A Chat or Responses call's reasoning: from the caller's effort, else from the model series.

    >>> openai_reasoning("o3", None), openai_reasoning("gpt-4o", "high"), openai_reasoning("gpt-5.4", "none")
    (Reasoning(budget=None), Reasoning(budget=None), None)
    """
    if effort == _NO_EFFORT:
        return None
    if isinstance(effort, str) or OPENAI_REASONING_MODELS.search(model):
        return Reasoning()
    return None


def anthropic_reasoning(model: str, thinking: Any) -> Reasoning | None:
    """A Messages call's reasoning, from its `thinking` config (`enabled` carries a budget), else
    from the model series (some always think)."""
    if thinking is None:
        return Reasoning() if ANTHROPIC_ALWAYS_THINKING.search(model) else None
    if not isinstance(thinking, Mapping):
        return None
    kind = thinking.get("type")
    if kind == "enabled":
        budget = thinking.get("budget_tokens")
        return Reasoning(budget if isinstance(budget, int) and not isinstance(budget, bool) else None)
    if kind in _ANTHROPIC_UNBUDGETED:
        return Reasoning()
    return None
