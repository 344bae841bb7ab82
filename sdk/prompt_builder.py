"""`sdk.Prompt`: build a prompt in canonical order from the start, for either provider."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sdk.adapters import adapter_for
from sdk.cache.hints import place_cache_hints
from sdk.call import Api, Provider
from sdk.policy import Policy
from sdk.prompt.canonical import canonicalize
from sdk.prompt.moving import add_note


@dataclass(frozen=True, slots=True)
class Prompt:
    """A prompt by stability tier, rendered to native kwargs in canonical order with cache breakpoints.

    >>> prompt = sdk.Prompt(system="You are terse.", documents=[policy_text], history=turns,
    ...                     dynamic={"Request ID": rid}, user="Summarise the policy.")
    >>> anthropic_client.messages.create(**prompt.to_anthropic(model="claude-sonnet-4-6", max_tokens=512))

    Tiers, front to back: tools, system, documents (pinned: rendered after the system prompt),
    history (native turns, never reordered), user (the final user content), dynamic (key: value
    lines in the context note that ends the prompt, after the user content: re-rendered with that
    turn in `history`, the prompt begins with this one up to the note, so it reads its cache).
    """

    user: str | list[Any]
    system: str = ""
    tools: Sequence[Mapping[str, Any]] = ()
    documents: Sequence[str] = ()
    history: Sequence[Mapping[str, Any]] = ()
    dynamic: Mapping[str, Any] = field(default_factory=dict)
    policy: Policy = field(default_factory=Policy)

    def __post_init__(self) -> None:
        if isinstance(self.documents, str):
            raise TypeError("Prompt.documents must be a sequence of strings, not one string")
        if not isinstance(self.user, (str, list)) or not self.user:
            raise ValueError(f"Prompt.user must be non-empty text or content parts, got {self.user!r}")

    def to_openai(self, model: str, **params: Any) -> dict[str, Any]:
        """Keyword arguments for `chat.completions.create`."""
        system = [{"role": "system", "content": text} for text in self._system_texts()]
        return self._render(Api.CHAT, Provider.OPENAI, model, system, params)

    def to_responses(self, model: str, **params: Any) -> dict[str, Any]:
        """Keyword arguments for `responses.create`."""
        system = [{"role": "developer", "content": text} for text in self._system_texts()]
        return self._render(Api.RESPONSES, Provider.OPENAI, model, system, params)

    def to_anthropic(self, model: str, **params: Any) -> dict[str, Any]:
        """Keyword arguments for `messages.create` / `messages.stream`."""
        system = [{"type": "text", "text": text} for text in self._system_texts()]
        return self._render(Api.MESSAGES, Provider.ANTHROPIC, model, system, params)

    def _system_texts(self) -> list[str]:
        return [text for text in (self.system, *self.documents) if text]

    def _render(
        self, api: Api, provider: Provider, model: str, system: list[Any], params: dict[str, Any]
    ) -> dict[str, Any]:
        adapter = adapter_for(api)
        kwargs: dict[str, Any] = {"model": model, **params}
        if self.tools:
            kwargs["tools"] = [dict(tool) for tool in self.tools]
        turns = [dict(turn) for turn in self.history] + [{"role": "user", "content": self.user}]
        if api is Api.MESSAGES:
            kwargs.update(system=system, messages=turns)
        elif api is Api.RESPONSES:
            kwargs["input"] = system + turns
        else:
            kwargs["messages"] = system + turns
        call = adapter.to_call(kwargs, provider)
        if self.dynamic:
            add_note(
                call,
                [f"{key}: {value}" for key, value in self.dynamic.items()],
                adapter.text_part_type,
                call.history_end,
            )
        canonicalize(call, self.policy, adapter)
        if self.policy.cache_hints:
            place_cache_hints(call, self.policy, adapter)
        return adapter.to_kwargs(call)
