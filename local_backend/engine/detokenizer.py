"""Incremental text of a request's output tokens, cut at stop strings, never emitting part of one."""

from __future__ import annotations

from local_backend._constants import DETOKENIZE_CONTEXT_TOKENS
from local_backend.model.tokenizer import TextTokenizer


class Detokenizer:
    """Appends each new token's text and finds stop strings; `take_delta()` returns safe text.

        A token's text is decode(context + new) − decode(context) over a few earlier tokens, so spaces
        and multi-byte characters come out as a full decode would give them; text ending in an
        incomplete character (U+FFFD) waits for the next token, and `flush()` at the end keeps its
    complete characters. Text is held back while its tail could
        still grow into a stop string, and a found stop string ends the text just before it
        (`stop_string` then names it: the one found earliest in the text). Each stop string is matched
        as the text grows (`StopMatch`), so a token costs the same whatever the stop strings' length
        (16 stop strings of 50,000 characters once cost the engine thread 185 ms a token).
    """

    def __init__(self, tokenizer: TextTokenizer, prompt_token_ids: list[int], stop: tuple[str, ...]):
        self._tokenizer = tokenizer
        self._ids = list(prompt_token_ids[-DETOKENIZE_CONTEXT_TOKENS:])
        self._prefix_offset = 0
        self._read_offset = len(self._ids)
        self._stops = [StopMatch(s) for s in stop]
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
        new = self.text[checked:]
        for match in self._stops:
            end = match.feed(new)
            if end is not None:
                at = checked + end - len(match.stop)
                if cut is None or at < cut:
                    cut, self.stop_string = at, match.stop
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
        return max((match.matched for match in self._stops), default=0)


class StopMatch:
    """Knuth-Morris-Pratt over one stop string: `matched` is the longest start of it the text fed so
    far ends with. Its border table grows only as far as the text has matched, so neither a token
    nor the request's start costs time in proportion to the stop string's length."""

    def __init__(self, stop: str):
        self.stop = stop
        self.matched = 0
        self._border = [0]  # _border[i]: the longest proper border of stop[: i + 1]

    def feed(self, text: str) -> int | None:
        """Feed `text`; the index in it just past the stop string's first occurrence, or None."""
        stop, border = self.stop, self._border
        for i, char in enumerate(text):
            while self.matched and stop[self.matched] != char:
                self.matched = border[self.matched - 1]
            if stop[self.matched] == char:
                self.matched += 1
                if self.matched == len(stop):
                    return i + 1
                self._grow(self.matched)
        return None

    def _grow(self, size: int) -> None:
        """Extend the border table to `size` entries."""
        stop, border = self.stop, self._border
        while len(border) < size:
            k = border[-1]
            char = stop[len(border)]
            while k and stop[k] != char:
                k = border[k - 1]
            border.append(k + 1 if stop[k] == char else 0)
