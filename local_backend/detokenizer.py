"""Incremental text of a request's output tokens, cut at stop strings, never emitting part of one."""

from __future__ import annotations

from local_backend._constants import DETOKENIZE_CONTEXT_TOKENS
from local_backend.tokenizer import TextTokenizer


class Detokenizer:
    """Appends each new token's text and finds stop strings; `take_delta()` returns safe text.

    A token's text is decode(context + new) − decode(context) over a few earlier tokens, so spaces
    and multi-byte characters come out as a full decode would give them; text ending in an
    incomplete character (U+FFFD) waits for the next token, and `flush()` at the end keeps its
complete characters. Text is held back while its tail could
    still grow into a stop string, and a found stop string ends the text just before it
    (`stop_string` then names it: the one found earliest in the text).
    """

    def __init__(self, tokenizer: TextTokenizer, prompt_token_ids: list[int], stop: tuple[str, ...]):
        self._tokenizer = tokenizer
        self._ids = list(prompt_token_ids[-DETOKENIZE_CONTEXT_TOKENS:])
        self._prefix_offset = 0
        self._read_offset = len(self._ids)
        self._stop = stop
        self._emitted = 0
        self.text = ""
        self.stop_string: str | None = None

    def add(self, token_id: int) -> bool:
        """Add one output token; True when the text now ends at a stop string."""
        self._ids.append(token_id)
        prefix = self._tokenizer.decode(self._ids[self._prefix_offset : self._read_offset])
        full = self._tokenizer.decode(self._ids[self._prefix_offset :])
        if len(full) <= len(prefix) or full.endswith("\ufffd"):
            return False
        checked = len(self.text)
        self.text += full[len(prefix) :]
        self._prefix_offset = self._read_offset
        self._read_offset = len(self._ids)
        if len(self._ids) > 4 * DETOKENIZE_CONTEXT_TOKENS:
            drop = self._prefix_offset
            self._ids = self._ids[drop:]
            self._prefix_offset, self._read_offset = 0, self._read_offset - drop
        return self._find_stop(checked)

    def flush(self) -> bool:
        """At the end: add what tokens held back as a possibly incomplete character decode to, up to
        the last complete character; True when the text now ends at a stop string."""
        if self.stop_string is not None or self._read_offset == len(self._ids):
            return False
        prefix = self._tokenizer.decode(self._ids[self._prefix_offset : self._read_offset])
        full = self._tokenizer.decode(self._ids[self._prefix_offset :])
        tail = full[len(prefix) :].rstrip("\ufffd") if len(full) > len(prefix) else ""
        self._read_offset = len(self._ids)
        if not tail:
            return False
        checked = len(self.text)
        self.text += tail
        return self._find_stop(checked)

    def _find_stop(self, checked: int) -> bool:
        cut = None
        for stop in self._stop:
            at = self.text.find(stop, max(0, checked - len(stop) + 1))
            if at >= 0 and (cut is None or at < cut):
                cut, self.stop_string = at, stop
        if cut is None:
            return False
        self.text = self.text[:cut]
        return True

    def take_delta(self, final: bool) -> str:
        """Text not yet taken, minus (unless `final`) a tail that may begin a stop string."""
        end = len(self.text)
        if not final and self.stop_string is None:
            end -= self._held_back()
        delta = self.text[self._emitted : end]
        self._emitted = max(self._emitted, end)
        return delta

    def _held_back(self) -> int:
        longest = 0
        for stop in self._stop:
            for n in range(min(len(stop) - 1, len(self.text)), longest, -1):
                if self.text.endswith(stop[:n]):
                    longest = n
                    break
        return longest
