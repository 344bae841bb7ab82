"""Text ↔ token ids from `tokenizer.json`, and the chat template of `tokenizer_config.json`."""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from tokenizers import Tokenizer

from local_backend.model.chat_template import BoundedEnvironment, TemplateBoundError, render
from local_backend.model.special_tokens import SpecialTokens

PROBE_MESSAGES: Final = ({"role": "user", "content": "Hi"},)
"""The conversation every chat template renders once at start-up: a template that passes a bound on
it is refused there, not on every request."""

PROBE_TOOL_NAME: Final = "kvwise_probe_tool"
PROBE_TOOLS: Final = (
    {
        "type": "function",
        "function": {
            "name": PROBE_TOOL_NAME,
            "description": "Probe.",
            "parameters": {"type": "object", "properties": {}},
        },
    },
)
"""A tool offered to the probe render: a template that shows its name renders tools itself."""


class TextTokenizer:
    """A `tokenizers.Tokenizer` plus the special tokens and chat template transformers would use.

    `encode("hi")` adds the checkpoint's BOS as transformers does; `chat_prompt(messages)` renders
    the Jinja chat template and encodes it without adding special tokens (the template has them):
    special tokens come only from the template, text in the messages that spells one is text
    (`special_tokens`).
    """

    def __init__(self, tokenizer: Tokenizer, config: Mapping[str, Any], template: str | None):
        self._tokenizer = tokenizer
        self.bos_token = _token_text(config.get("bos_token"))
        self.eos_token = _token_text(config.get("eos_token"))
        self.bos_token_id = tokenizer.token_to_id(self.bos_token) if self.bos_token else None
        self.eos_token_id = tokenizer.token_to_id(self.eos_token) if self.eos_token else None
        self._add_bos = bool(config.get("add_bos_token", False))
        self._containing: dict[tuple[str, ...], frozenset[int]] = {}
        self._template = None
        self._template_source = template or ""
        self._specials = SpecialTokens(tokenizer)
        self.renders_tools = False
        """Whether the chat template itself renders a `tools` list (Hermes, Qwen, Llama 3.1 templates do):
        whether a probe render shows an offered tool (a template naming `tools` only in a comment
        would otherwise drop them)."""
        if template is not None:
            self._template = BoundedEnvironment().from_string(template)
            self._probe()

    def _probe(self) -> None:
        """Render `PROBE_MESSAGES` without and with `PROBE_TOOLS`: `TemplateBoundError` if either passes
        a bound (refused at start-up); a template that refuses them otherwise is served as it is."""
        for tools in ((), PROBE_TOOLS):
            try:
                text = self._render({"messages": list(PROBE_MESSAGES), "tools": list(tools)}, True, bool(tools))
            except TemplateBoundError:
                raise
            except ValueError:
                continue
            self.renders_tools = PROBE_TOOL_NAME in text

    @classmethod
    def from_dir(cls, directory: Path, chat_template: str | None = None) -> TextTokenizer:
        """Read `tokenizer.json`, `tokenizer_config.json` and `chat_template.jinja` if present;
        `chat_template`, when given, replaces the checkpoint's (vLLM's `--chat-template`)."""
        config = json.loads((directory / "tokenizer_config.json").read_text())
        template = config.get("chat_template")
        if isinstance(template, list):
            template = next((t["template"] for t in template if t.get("name") == "default"), None)
        separate = directory / "chat_template.jinja"
        if separate.exists():
            template = separate.read_text()
        return cls(Tokenizer.from_file(str(directory / "tokenizer.json")), config, chat_template or template)

    def to_json(self) -> str:
        """The `tokenizer.json` text (what grammar libraries such as llguidance build their token tries from)."""
        return self._tokenizer.to_str()

    @property
    def vocab_size(self) -> int:
        return self._tokenizer.get_vocab_size(with_added_tokens=True)

    @functools.cached_property
    def max_bytes_per_token(self) -> int | None:
        """Most bytes of text one token can stand for (the longest vocabulary entry's UTF-8 bytes, an
        upper bound for byte-level BPE and SentencePiece alike), so text of B bytes is at least
        B ÷ this many tokens; None when the checkpoint's normalizer may shorten text (NFC composes
        characters, BERT's drops some) and no such bound holds."""
        normalizer = json.loads(self._tokenizer.to_str()).get("normalizer")
        steps = [] if normalizer is None else normalizer.get("normalizers", [normalizer])
        if not all(_keeps_length(step) for step in steps):
            return None
        return max(len(token.encode()) for token in self._tokenizer.get_vocab(with_added_tokens=True))

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        """Token ids of `text`; `ValueError` when it holds a lone surrogate (no tokenizer can encode one)."""
        _check_scalar_values(text)
        ids = self._tokenizer.encode(text, add_special_tokens=add_special_tokens).ids
        bos = self.bos_token_id
        if add_special_tokens and self._add_bos and bos is not None and ids[:1] != [bos]:
            ids.insert(0, bos)
        return ids

    def decode(self, ids: Sequence[int]) -> str:
        """Text of `ids` with special tokens skipped."""
        return self._tokenizer.decode(list(ids), skip_special_tokens=True)

    def ids_containing(self, strings: tuple[str, ...]) -> frozenset[int]:
        """Ids of the tokens whose text contains one of `strings` (DRY breakers), computed once."""
        if strings not in self._containing:
            self._containing[strings] = frozenset(
                i
                for i in range(self.vocab_size)
                if any(s in self._tokenizer.decode([i], skip_special_tokens=False) for s in strings)
            )
        return self._containing[strings]

    def chat_prompt(
        self,
        messages: Sequence[Mapping[str, Any]],
        add_generation_prompt: bool = True,
        tools: Sequence[Mapping[str, Any]] | None = None,
        continue_final_message: bool = False,
        template_kwargs: Mapping[str, Any] | None = None,
    ) -> list[int]:
        """Token ids of `messages` rendered by the checkpoint's chat template (with `tools` when given).

        `template_kwargs` are more variables for the template (vLLM's `chat_template_kwargs`); the
        template's own names win. `continue_final_message` cuts the text right after the last
        message's content, so the model continues it instead of closing it (transformers' rule).
        Special tokens spelled in any of these values are tokenized as text.
        """
        if self._template is None:
            raise ValueError("this checkpoint has no chat_template in tokenizer_config.json")
        given = {"kwargs": dict(template_kwargs or {}), "messages": list(messages), "tools": list(tools or ())}
        values, restore = self._specials.escape(given, self._template_source)
        text = self._render(values, add_generation_prompt, bool(tools))
        if continue_final_message:
            text = _open_final_message(text, str(values["messages"][-1].get("content") or ""))
        _check_scalar_values(text)
        return self._specials.encode(text, restore)

    def _render(self, values: Mapping[str, Any], add_generation_prompt: bool, with_tools: bool) -> str:
        """The template's text (`chat_template.render`: bounded; a failure is a `ValueError`)."""
        assert self._template is not None
        variables = {**values["kwargs"]} if "kwargs" in values else {}
        variables.update(
            messages=values["messages"],
            add_generation_prompt=add_generation_prompt,
            bos_token=self.bos_token or "",
            eos_token=self.eos_token or "",
        )
        if with_tools:
            variables["tools"] = values["tools"]
        return render(self._template, variables)


def _check_scalar_values(text: str) -> None:
    try:
        text.encode()
    except UnicodeEncodeError as exc:
        raise ValueError(
            f"text holds a lone surrogate at index {exc.start}: text must be Unicode scalar values"
        ) from None


def _open_final_message(text: str, content: str) -> str:
    """`text` cut right after the last place `content` (the final message's) appears, its trailing
    whitespace kept where the template kept it; `ValueError` when the template did not render it."""
    final = content.strip()
    at = text.rfind(final) if final else -1
    if at < 0:
        raise ValueError("continue_final_message: the final message's text is not in the rendered prompt")
    cut = at + len(final)
    trailing = content[len(content.rstrip()) :]
    return text[: cut + len(trailing) if text.startswith(trailing, cut) else cut]


def _keeps_length(step: Mapping[str, Any]) -> bool:
    """Whether a `tokenizer.json` normalizer step never shortens text: Llama 2 and Mistral's prepend
    `▁` and replace each space by it; any other step (NFC, lowercasing `Ω`) may."""
    if step.get("type") == "Prepend":
        return True
    pattern = step.get("pattern", {}).get("String")
    content = step.get("content")
    return (
        step.get("type") == "Replace"
        and isinstance(pattern, str)
        and isinstance(content, str)
        and len(content.encode()) >= len(pattern.encode())
    )


def _token_text(value: str | Mapping[str, Any] | None) -> str | None:
    if isinstance(value, Mapping):
        return str(value.get("content"))
    return value
