"""The caller's words around a value: what moves with it, so the note reads as the caller wrote it.

A value cut out of its sentence loses its meaning: "The current date is." stays behind, and the
note reads a bare `2026-03-17 07:05:51` without the "PM PDT-0700" that followed it or the words
that said what it is. So a value moves with whole words of the caller (DESIGN, "Canonical order"):
- its sentence: from the line's start (after its indentation) or the end of the sentence before
  it, to the mark that closes it (`.`, `!` or `?` before a space or the line's end, with any
  closing quote or bracket) or the line's end. A mark inside a value (`a.m.`, `Mar.`), after an
  abbreviation (`e.g.`, `Dr.`) or a single letter, or after a list number, closes nothing. A
  labelled value that is its own sentence ("Current date: 2026-12-02. Be brief.") is that
  sentence; a log line of `key=value` pairs or a table row is one sentence, whole;
- a sentence that is its line's whole content is the line, its bullet with it; it takes the
  heading above it when that heading's section is nothing else (`## Session` over a UUID), and a
  date takes the heading above it that names the current date (`### Current Date` over
  `3/17/2026`, `Current date:` over a date) and a weekday line beside it (`Day of Week: Tuesday`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from sdk.prompt.dates import DAY, names_now_heading

_BULLET = re.compile(r"[ \t]*(?:[-*+>]|\d{1,3}[.)])[ \t]+")
_MARK = re.compile(r"[.!?]+[\"'”’)\]*_]*(?=[ \t\r]|$)")
_ABBREVIATION = re.compile(
    r"(?:\b(?:e\.g|i\.e|ie|eg|etc|vs|cf|approx|incl|Mr|Mrs|Ms|Dr|Prof|St|No|Inc|Ltd|Jr|Sr|a\.m|p\.m)|(?<![\w.])[A-Za-z])$",
    re.IGNORECASE,
)
_HEADING = re.compile(r"[ \t]*(?:#{1,6}[ \t]+\S.*|(?:\*\*|__)[^*_\n]+(?:\*\*|__):?)[ \t\r]*")
_WEEKDAY_LINE = re.compile(
    rf"[ \t]*(?:[-*+][ \t]+)?(?:\*\*|__)?(?i:day(?:[ _-]of[ _-](?:the[ _-])?week)?|weekday|today)(?:\*\*|__)?[ \t]*:"
    rf"(?:\*\*|__)?[ \t]*{DAY}\.?[ \t\r]*"
)


def caller_words(text: str, start: int, end: int, values: Sequence[tuple[int, int]], date: bool) -> tuple[int, int]:
    """The span of `text` that moves with the value at `start:end` (see the module); `values` are
    the spans of every value found in `text` (no mark inside one closes a sentence), `date` whether
    the value is a date (it takes a weekday line beside it)."""
    line_start = text.rfind("\n", 0, start) + 1
    line_end = len(text) if (newline := text.find("\n", end)) < 0 else newline
    content = _skip_indent(text, line_start)
    content_end = line_start + len(text[line_start:line_end].rstrip())
    if text.startswith("|", content):
        return _line_block(text, content, content_end, date)
    bullet = _BULLET.match(text, line_start)
    first = content if bullet is None else bullet.end()
    sentence_start, sentence_end = first, content_end
    for mark in _MARK.finditer(text, first, content_end):
        if not _closes(text, mark, first, values):
            continue
        if mark.end() <= start:
            sentence_start = _skip_indent(text, mark.end())
        elif mark.end() >= end:
            sentence_end = mark.end()
            break
    if (sentence_start, sentence_end) == (first, content_end):
        return _line_block(text, content, content_end, date)
    return sentence_start, sentence_end


def _closes(text: str, mark: re.Match[str], first: int, values: Sequence[tuple[int, int]]) -> bool:
    """Whether `mark` ends a sentence: not inside a value (a value's own last dot, as in "a.m.",
    does), not after an abbreviation or an initial."""
    for start, end in values:
        if start <= mark.start() < end:
            return mark.end() >= end
    return text[mark.start()] != "." or _ABBREVIATION.search(text, first, mark.start()) is None


def _skip_indent(text: str, position: int) -> int:
    while position < len(text) and text[position] in " \t":
        position += 1
    return position


def _line_block(text: str, start: int, end: int, date: bool) -> tuple[int, int]:
    """A line whose whole content moves (`start:end`), with the heading over it when its section is
    nothing else, and the weekday line beside it when it holds a date."""
    if date:
        below = _next_line(text, end)
        if below is not None and _WEEKDAY_LINE.fullmatch(text, *below):
            end = below[0] + len(text[below[0] : below[1]].rstrip())
        above = _previous_line(text, start)
        if above is not None and _WEEKDAY_LINE.fullmatch(text, *above):
            start = _skip_indent(text, above[0])
    above = _previous_line(text, start)
    if above is not None and not text[above[0] : above[1]].strip():
        above = _previous_line(text, above[0])
    if above is None or not _HEADING.fullmatch(text, *above) and not (date and names_now_heading(text[slice(*above)])):
        return start, end
    below = _next_line(text, end)
    if date and names_now_heading(text[slice(*above)]) or below is None or _ends_section(text[slice(*below)]):
        start = _skip_indent(text, above[0])
    return start, end


def _ends_section(line: str) -> bool:
    return not line.strip() or _HEADING.fullmatch(line) is not None


def _next_line(text: str, position: int) -> tuple[int, int] | None:
    """The span of the line after the one holding `position`, None on the last line."""
    newline = text.find("\n", position)
    if newline < 0:
        return None
    after = text.find("\n", newline + 1)
    return newline + 1, len(text) if after < 0 else after


def _previous_line(text: str, position: int) -> tuple[int, int] | None:
    """The span of the line before the one holding `position`, None on the first line."""
    line_start = text.rfind("\n", 0, position) + 1
    if line_start == 0:
        return None
    return text.rfind("\n", 0, line_start - 1) + 1, line_start - 1
