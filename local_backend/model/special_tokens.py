"""Special tokens come only from the chat template: text a caller sends that spells one stays text.

A chat template writes its turns with special tokens (`<|im_start|>system`, `<|im_end|>`); a
tokenizer reads any text spelling one as that token, so a message, a tool's description or result
(a fetched web page) holding `<|im_end|>\\n<|im_start|>system ...` became a real system turn
(vLLM, llama.cpp and transformers do the same by default). Here, before the template runs, each
special token a caller's value spells is replaced by a private-use character that no caller value
and not the template holds (`escape`); after it runs, the text is tokenized in pieces between the
template's own special tokens, each piece with the tokenizer's split-special-tokens mode
(`encode_special_tokens`) and the caller's spellings put back (`encode`). A prompt whose values
spell none is tokenized whole, as before.

    values, restore = specials.escape({"messages": messages, "tools": tools}, template_source)
    ids = specials.encode(template.render(**values), restore)
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Final

from tokenizers import Tokenizer

PRIVATE_USE_RANGES: Final = ((0x100000, 0x10FFFE), (0xF0000, 0xFFFFE), (0xE000, 0xF900))
"""Where the characters that stand for a caller's spellings of special tokens are taken from: the
Unicode private-use planes and area, no text's meaning (one not in the request's text is chosen)."""

_PREPEND_SCHEME: Final = "prepend_scheme"


class SpecialTokens:
    """A tokenizer's special tokens, found in text and kept out of what callers wrote."""

    def __init__(self, tokenizer: Tokenizer):
        self._tokenizer = tokenizer
        texts = sorted(t.content for t in tokenizer.get_added_tokens_decoder().values() if t.special and t.content)
        ids = {text: tokenizer.token_to_id(text) for text in texts}
        self._ids = {text: i for text, i in ids.items() if i is not None}
        self._pattern = re.compile(_trie_pattern(texts)) if texts else None
        self._first = _copy(tokenizer, at_start=True)
        self._rest = _copy(tokenizer, at_start=False)

    def escape(self, values: Any, template: str) -> tuple[Any, dict[str, str]]:
        """`values` (strings, lists and dicts, keys included) with each special token they spell
        replaced by a private-use character, and the map back; `values` itself when none is spelled."""
        pattern = self._pattern
        if pattern is None:
            return values, {}
        strings = list(_strings(values))
        spelled = sorted({match for text in strings for match in pattern.findall(text)})
        if not spelled:
            return values, {}
        used = set(template).union(*strings)
        free = (c for start, end in PRIVATE_USE_RANGES for c in map(chr, range(start, end)) if c not in used)
        sentinels = dict(zip(spelled, free))
        if len(sentinels) < len(spelled):
            raise ValueError(
                "the request's text uses every private-use character: nothing is left to mark the "
                "special tokens it spells as text"
            )
        return _map_strings(values, lambda text: pattern.sub(lambda m: sentinels[m.group()], text)), {
            sentinel: text for text, sentinel in sentinels.items()
        }

    def encode(self, text: str, restore: Mapping[str, str]) -> list[int]:
        """Token ids of rendered `text` without adding BOS: whole when `restore` is empty, else in pieces
        between the template's special tokens, the caller's spellings (`restore`) read as plain text."""
        if not restore or self._pattern is None:
            return self._tokenizer.encode(text, add_special_tokens=False).ids
        table = str.maketrans(dict(restore))
        ids: list[int] = []
        at = 0
        for match in [*self._pattern.finditer(text), None]:
            end = len(text) if match is None else match.start()
            if end > at:  # a tokenizer prepending `▁` only at the text's start ("first") must not at a piece's
                piece = (self._first if at == 0 else self._rest).encode(
                    text[at:end].translate(table), add_special_tokens=False
                )
                ids += piece.ids
            if match is not None:
                ids.append(self._ids[match.group()])
                at = match.end()
        return ids


def _copy(tokenizer: Tokenizer, at_start: bool) -> Tokenizer:
    """The tokenizer in split-special-tokens mode; not `at_start`, a `Metaspace` that prepends `▁` to
    the text's first piece only (`prepend_scheme: first`) prepends nothing, as in the middle of a text."""
    spec = json.loads(tokenizer.to_str())
    if not at_start:
        for step in _steps(spec.get("pre_tokenizer")):
            if step.get("type") == "Metaspace" and step.get(_PREPEND_SCHEME) == "first":
                step[_PREPEND_SCHEME] = "never"
    copy = Tokenizer.from_str(json.dumps(spec))
    copy.encode_special_tokens = True
    return copy


def _steps(pre_tokenizer: Mapping[str, Any] | None) -> Iterator[dict[str, Any]]:
    if pre_tokenizer is None:
        return
    yield from (pre_tokenizer.get("pretokenizers") or [pre_tokenizer])


def _trie_pattern(texts: list[str]) -> str:
    """A regex matching any of `texts`, longest first at each position, as a trie: each branch fails at
    its first character, so thousands of special tokens cost little per character of text."""
    trie: dict[str, Any] = {}
    for text in texts:
        node = trie
        for char in text:
            node = node.setdefault(char, {})
        node[""] = {}

    def pattern(node: dict[str, Any]) -> str:
        branches = [re.escape(char) + pattern(child) for char, child in sorted(node.items()) if char]
        if "" in node:
            return f"(?:{'|'.join(branches)})?" if branches else ""
        return branches[0] if len(branches) == 1 else f"(?:{'|'.join(branches)})"

    return pattern(trie)


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield from _strings(key)
            yield from _strings(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _strings(item)


def _map_strings(value: Any, change: Callable[[str], str]) -> Any:
    if isinstance(value, str):
        return change(value)
    if isinstance(value, Mapping):
        return {_map_strings(key, change): _map_strings(item, change) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_map_strings(item, change) for item in value]
    return value
