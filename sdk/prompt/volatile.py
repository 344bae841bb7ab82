"""Volatile content: the bytes in a prompt that change on every call, and how to cut them out.

A provider's prompt cache hits only on a byte-identical prefix. One UUID, timestamp or request id in
the tools or the system prompt makes every call's prefix new, and everything after it is prefilled
again. `find_volatile` finds such bytes; `cut_volatile` removes them with the caller's words around
them (their sentence, line or heading: `sdk.prompt.sentences`), so that the canonicaliser can move
those words to a context note, verbatim (nothing is dropped, no label is made up);
`mask_volatile` replaces the bytes with placeholders, to tell a volatile change from a real one.

What counts (each a `VolatileKind`):
- UUID: any version, optionally in braces.
- TIMESTAMP: a date *with a time*: ISO 8601, `date`/`ctime` output, RFC 2822, `29/11/2026 08:55`,
  `Nov 29, 2026 8:55 AM`, `2026-03-17 07:05:51 PM PDT-0700`; or a time of day alone introduced as
  the current one ("The current time is 7:05 PM PDT.": `sdk.prompt.dates`).
- DATE: a date that names the current day, in any written form: introduced as the current one
  ("The current date is Tuesday, March 17, 2026."), under a heading that names it, or today's by
  its value (`sdk.prompt.dates`). Any other plain date ("Founded on 2019-05-01") is not volatile.
- EPOCH: Unix seconds (10 digits in [1e9, 2e9), optionally with a fraction) or milliseconds (13).
- NONCE: a hex run of at least `VOLATILE_MIN_HEX_CHARS`, a base64/base64url run of at least
  `VOLATILE_MIN_BASE64_CHARS` with upper and lower case and digits, or a JWT. Runs that read as
  identifiers (half their length in words, or many short `_`/`-` parts), paths (a `/` without the
  `+` or `=` of real base64), repetitive constants (`0x7fffffffffffffff`) or alphabets
  (`0123456789abcdef`) are not nonces. Detection is best effort: about one random token in ten
  reads as words by chance and stays (a missed nonce costs a cache miss; a false one would move
  the user's text).
- LABELLED_VALUE: a label such as `Request ID`, `Trace-Id`, `Timestamp`, `Current time`,
  `Current date`, `Date`, `Now`, `Session`, `Nonce` (capitalised, then `:`; in any case where the
  value is a date or a time: `- date: 2026-03-17`) or a log-style `request_id=` (also after
  another `key=value`), where a line, a list item, a sentence or a bracket starts, with its value:
  a date and time in any of the forms above (a plain date counts here: "Current date:
  2026-12-02"), a time, or one token with a digit. The label and its value are the match (what
  is masked); the cut takes their sentence ("Current date: 2026-12-02." out of "... Always reply
  in French."). It wins over the tokens inside it.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Collection
from dataclasses import dataclass
from enum import StrEnum

from sdk._constants import (
    VOLATILE_IDENTIFIER_PART_CHARS,
    VOLATILE_IDENTIFIER_PARTS,
    VOLATILE_LINE_CACHE_SIZE,
    VOLATILE_MAX_ASCENDING_RUN,
    VOLATILE_MAX_WORD_SHARE,
    VOLATILE_MIN_BASE64_CHARS,
    VOLATILE_MIN_DISTINCT_CHARS,
    VOLATILE_MIN_HEX_CHARS,
    VOLATILE_SCAN_CACHE_SIZE,
)
from sdk.prompt.dates import (
    AMPM,
    DATE,
    DAY,
    MONTH,
    TIME,
    TIME_OF_DAY,
    YMD,
    ZONE,
    introduced_as_now,
    names_now,
    now_heading,
    today,
)
from sdk.prompt.sentences import caller_words


class VolatileKind(StrEnum):
    """What kind of volatile bytes a match is."""

    UUID = "uuid"
    TIMESTAMP = "timestamp"
    EPOCH = "epoch"
    NONCE = "nonce"
    LABELLED_VALUE = "labelled_value"
    DATE = "date"
    LINE = "line"  # a line its prompt family showed changing (`sdk.prompt.families`): not found here, cut whole


@dataclass(frozen=True, slots=True)
class VolatileMatch:
    """Volatile bytes `text` at `start:end`; `label` is the value's label or the kind's name, and
    `value` the bytes the context note carries after it (`text` without the label, or all of it)."""

    start: int
    end: int
    kind: VolatileKind
    label: str
    text: str
    value: str


_DAY, _MONTH, _TIME, _AMPM, _ZONE, _YMD = DAY, MONTH, TIME, AMPM, ZONE, YMD
_CLOCK = rf"(?:at[ ]+)?{_TIME}{_AMPM}?{_ZONE}?"
_TIMESTAMPS = [
    rf"{_YMD}[T ]{_TIME}{_AMPM}?{_ZONE}?",  # ISO 8601: 2026-11-29T08:55:21Z, 2026-11-29 08:55:21.123+01:00
    r"(?:19|20)\d\d(?:0[1-9]|1[0-2])(?:0[1-9]|[12]\d|3[01])T[0-2]\d[0-5]\d(?:[0-5]\d)?Z?",  # 20261129T085521Z
    rf"{_DAY}[ ]+{_MONTH}[ ]+\d{{1,2}}[ ]+{_TIME}(?:[ ]+[A-Z]{{2,5}})?[ ]+\d{{4}}",  # Sun Nov 29 08:55:21 UTC 2026
    rf"(?:{_DAY},?[ ]+)?\d{{1,2}}[ ]+{_MONTH}[ ]+\d{{4}},?[ ]+{_CLOCK}",  # Sun, 29 Nov 2026 08:55:21 +0000
    rf"(?:{_DAY},?[ ]+)?{_MONTH}[ ]+\d{{1,2}}(?:st|nd|rd|th)?,?[ ]+\d{{4}},?[ ]+{_CLOCK}",  # Nov 29, 2026 8:55 AM
    # 29/11/2026 08:55, 11/29/2026, 8:55 PM, 2026/11/29 08:55
    rf"(?:\d{{1,2}}(?P<sep>[/.-])\d{{1,2}}(?P=sep)(?:\d{{4}}|\d\d)|\d{{4}}/\d{{1,2}}/\d{{1,2}}),?[ ]+{_CLOCK}",
]
_HEX_CHARS = r"[0-9a-fA-F]"
_UUID_BODY = rf"{_HEX_CHARS}{{8}}-(?:{_HEX_CHARS}{{4}}-){{3}}{_HEX_CHARS}{{12}}"
_LABELS = (
    r"(?:x-)?(?:request|trace|span|correlation|session|run|conversation|message|event)[ _-]?id"
    r"|session|nonce|timestamp|generated[ _-](?:at|on)"
    r"|(?:(?:current|local|server|system|today'?s?)[ _-])?(?:date(?:[ _-]?(?:and[ _-])?time)?|datetime|time)"
    r"|today|now"
)
_EMPHASIS = r"(?:\*\*|__)?"
_DATE = (
    rf"(?:{_DAY},?[ ]+)?(?:{_YMD}|\d{{1,2}}(?:st|nd|rd|th)?[ ]+{_MONTH}(?:,?[ ]+\d{{4}})?"
    rf"|{_MONTH}[ ]+\d{{1,2}}(?:st|nd|rd|th)?(?:,?[ ]+\d{{4}})?"
    rf"|\d{{1,2}}[/.]\d{{1,2}}[/.](?:\d{{4}}|\d\d)|\d{{4}}/\d{{1,2}}/\d{{1,2}})"
)
_VALUE_END = r"(?=$|[\s.,;:!?)\]'\"])"
_WHEN = rf"{_TIMESTAMPS[2]}|{_DATE}(?:(?:T|,?[ ]+(?:at[ ]+)?){_TIME}{_AMPM}?{_ZONE}?)?|{_TIME}{_AMPM}?{_ZONE}?"
WHEN = re.compile(_WHEN, re.ASCII)
"""A date or a time of day as a label's value (`WHEN.fullmatch`): "Current date: 2026-12-02", "Time: 8:55 PM"."""
_LABELLED_VALUE = re.compile(
    rf"(?:^[ \t]*(?:[-*+>][ \t]+)?|(?<=[.!?;][ \t])|(?<=[(\[])|(?<=[ \t])(?=(?i:{_LABELS})=))"
    rf"(?P<body>{_EMPHASIS}(?P<label>(?i:{_LABELS})){_EMPHASIS}"
    rf"(?:[ \t]*:{_EMPHASIS}[ \t]*(?P<colon>(?:{_WHEN}|[^\s.,;!?)\]]+(?:[.,;:!?]+[^\s.,;!?)\]]+)*){_VALUE_END})"
    rf"|=(?P<equals>[\w:+/-]+(?:\.[\w:+/-]+)*)(?=[ \t]|$)))",
    re.MULTILINE | re.ASCII,
)
_DIGIT = re.compile(r"\d", re.ASCII)
_WORD = re.compile(r"[A-Z]?[a-z]{3,}|[A-Z]{3,}")
_SEPARATOR = re.compile(r"[_-]+")


def _is_labelled_value(match: re.Match[str]) -> bool:
    if (value := match["equals"]) is not None:
        return _DIGIT.search(value) is not None
    value = match["colon"]
    return _DIGIT.search(value) is not None and (match["label"][0].isupper() or WHEN.fullmatch(value) is not None)


def _ascending_run(token: str) -> int:
    longest = run = 1
    for before, after in zip(token, token[1:]):
        run = run + 1 if ord(after) == ord(before) + 1 else 1
        longest = max(longest, run)
    return longest


def _looks_random(token: str) -> bool:
    """Neither a repetitive constant nor an alphabet."""
    return len(set(token)) >= VOLATILE_MIN_DISTINCT_CHARS and _ascending_run(token) <= VOLATILE_MAX_ASCENDING_RUN


def _is_hex_nonce(match: re.Match[str]) -> bool:
    token = match[0].removeprefix("0x").lower()
    return any(c.isdigit() for c in token) and any(c.isalpha() for c in token) and _looks_random(token)


def _is_identifier(token: str) -> bool:
    """Whether `token` reads as words (`LineOver1DRangeSeries`, `_OP_NO_SSLv2_OR_SSLv3`)."""
    if sum(len(word) for word in _WORD.findall(token)) >= VOLATILE_MAX_WORD_SHARE * len(token):
        return True
    parts = [part for part in _SEPARATOR.split(token) if part]
    return len(parts) >= VOLATILE_IDENTIFIER_PARTS and len(token) < VOLATILE_IDENTIFIER_PART_CHARS * len(parts)


def _is_base64_nonce(match: re.Match[str]) -> bool:
    token = match[0]
    return (
        any(c.isupper() for c in token)
        and any(c.islower() for c in token)
        and any(c.isdigit() for c in token)
        and ("/" not in token or "+" in token or token.endswith("="))
        and not _is_identifier(token)
        and _looks_random(token)
    )


def _always(match: re.Match[str]) -> bool:
    return True


def _token(pattern: str) -> re.Pattern[str]:
    return re.compile(rf"(?<!\w)(?:{pattern})(?!\w)", re.ASCII)


# (kind, pattern, acceptance test); at equal start and length the earlier entry wins.
_PATTERNS: list[tuple[VolatileKind, re.Pattern[str], Callable[[re.Match[str]], bool]]] = [
    (VolatileKind.LABELLED_VALUE, _LABELLED_VALUE, _is_labelled_value),
    (VolatileKind.UUID, re.compile(rf"\{{{_UUID_BODY}\}}|(?<![\w-]){_UUID_BODY}(?![\w-])", re.ASCII), _always),
    *((VolatileKind.TIMESTAMP, _token(pattern), _always) for pattern in _TIMESTAMPS),
    (VolatileKind.EPOCH, re.compile(r"(?<![\w.+$-])1(?:\d{12}|\d{9}(?:\.\d{1,9})?)(?!\w|\.\d)", re.ASCII), _always),
    (VolatileKind.NONCE, _token(r"eyJ[\w-]{8,}\.eyJ[\w-]{8,}\.[\w-]+"), _always),
    (
        VolatileKind.NONCE,
        re.compile(rf"(?<![\w.-])(?:0x)?{_HEX_CHARS}{{{VOLATILE_MIN_HEX_CHARS},}}(?![\w-])", re.ASCII),
        _is_hex_nonce,
    ),
    (
        VolatileKind.NONCE,
        re.compile(rf"(?<![\w+/=.-])[\w+/-]{{{VOLATILE_MIN_BASE64_CHARS},}}={{0,2}}(?![\w+/=-])", re.ASCII),
        _is_base64_nonce,
    ),
]


def find_volatile(text: str) -> list[VolatileMatch]:
    """The volatile bytes in `text`: non-overlapping, in order; a labelled value wins over its tokens.

    Of overlapping candidates the one starting first wins, then the longest, then the earlier kind.
    Every pattern needs a digit (a UUID of letters only is not worth the scan), so text without
    one is skipped; the same text (a system prompt sent on every call) is scanned once a day (a
    date is found by its value too: `sdk.prompt.dates`), and a text seen with one line changed (a
    new request id) rescans that line only.
    """
    if _DIGIT.search(text) is None:
        return []
    return list(_scan(text, today()))


@functools.lru_cache(maxsize=VOLATILE_SCAN_CACHE_SIZE)
def _scan(text: str, now: int) -> tuple[VolatileMatch, ...]:
    """Line by line: no pattern matches across a newline, and each treats one as it treats the
    text's ends, so the matches are those of the whole text. A line under a heading that names the
    current date is scanned with the heading above it, as the whole text would be."""
    if "\n" not in text:
        return _scan_line(text, now)
    found: list[VolatileMatch] = []
    offset = 0
    for line in text.split("\n"):
        if _DIGIT.search(line) is not None:
            heading = now_heading(text, offset)
            start = offset if heading is None else heading
            found += [
                VolatileMatch(m.start + start, m.end + start, m.kind, m.label, m.text, m.value)
                for m in _scan_line(text[start : offset + len(line)], now)
                if m.start + start >= offset
            ]
        offset += len(line) + 1
    return tuple(found)


@functools.lru_cache(maxsize=VOLATILE_LINE_CACHE_SIZE)
def _scan_line(text: str, now: int) -> tuple[VolatileMatch, ...]:
    candidates: list[tuple[int, int, int, VolatileKind, str, str]] = []
    for rank, (kind, pattern, accept) in enumerate(_PATTERNS):
        for match in pattern.finditer(text):
            if not accept(match):
                continue
            if kind is VolatileKind.LABELLED_VALUE:
                value = match["colon"] if match["equals"] is None else match["equals"]
                candidates.append((match.start("body"), -match.end(), rank, kind, match["label"], value))
            else:
                candidates.append((match.start(), -match.end(), rank, kind, kind.value, match[0]))
    for match in DATE.finditer(text):  # a date that names today (`sdk.prompt.dates`), after every other kind
        line_start = text.rfind("\n", 0, match.start()) + 1
        line_end = len(text) if (end := text.find("\n", match.end())) < 0 else end
        under_heading = now_heading(text, line_start) is not None
        start, end = match.start() - line_start, match.end() - line_start
        if names_now(text[line_start:line_end], start, end, under_heading, now):
            kind = VolatileKind.DATE
            candidates.append((match.start(), -match.end(), len(_PATTERNS), kind, kind.value, match[0]))
    for match in TIME_OF_DAY.finditer(text):  # a time of day introduced as the current one
        line_start = text.rfind("\n", 0, match.start()) + 1
        if introduced_as_now(text[line_start : match.start()], match.start() - line_start):
            kind = VolatileKind.TIMESTAMP
            candidates.append((match.start(), -match.end(), len(_PATTERNS) + 1, kind, kind.value, match[0]))
    candidates.sort()
    found: list[VolatileMatch] = []
    for start, negative_end, _, kind, label, value in candidates:
        if not found or start >= found[-1].end:
            found.append(VolatileMatch(start, -negative_end, kind, label, text[start:-negative_end], value))
    return tuple(found)


def mask_volatile(text: str) -> str:
    """`text` with each match replaced by `<label>`: `<uuid>`, `<timestamp>`, `<Request ID>`, ..."""
    pieces: list[str] = []
    position = 0
    for match in find_volatile(text):
        pieces += [text[position : match.start], f"<{match.label}>"]
        position = match.end
    pieces.append(text[position:])
    return "".join(pieces)


def note_lines(match: VolatileMatch) -> list[str]:
    """The lines a cut match puts in the context note: the caller's words as cut, verbatim
    ("The current date is Tuesday, March 17, 2026.", `- date: 2026-03-17`), blank lines left out."""
    return [line.rstrip() for line in match.text.split("\n") if line.strip()]


_SPACES = " \t"
_OPENERS = "([{"
_TIGHT = ",.;:!?)]}"
_WHEN_KINDS = frozenset({VolatileKind.DATE, VolatileKind.TIMESTAMP})


def cut_volatile(text: str, keep: Collection[int] = (), lines: Collection[int] = ()) -> tuple[str, list[VolatileMatch]]:
    """`text` without its volatile bytes, and the matches removed, in order of position.

    `keep` names matches that stay where they are, by their index in `find_volatile(text)` (bytes
    that look volatile but are the same on every call); `lines` names lines of `text` (by index)
    that move whole, each a `VolatileKind.LINE` match (a line its prompt family showed changing).

    A match goes with the caller's words around it (`sdk.prompt.sentences`: its sentence, its line
    with its bullet, the heading over it, a weekday line beside a date), which become the removed
    match's `text`, and the whitespace around the cut is tidied: no double spaces, no line left
    blank. A kept match in the sentence of a moving one goes with that sentence (a value is never
    split from its words). Only whitespace is dropped, so the result plus the matches' texts hold
    every other character of `text`. If a cut joins the text around it into new volatile bytes,
    those are cut too, so the result is free of volatile bytes (cutting it again finds only the
    kept ones); such a match's `start:end` spans the earlier cut.
    """
    found = find_volatile(text)
    kept = {(match.start, match.end) for index, match in enumerate(found) if index in keep}
    matches = [match for match in found if (match.start, match.end) not in kept]
    whole = _line_matches(text, lines)
    if not matches and not whole:
        return text, []
    chars = list(text)
    origin = list(range(len(text)))
    removed: list[VolatileMatch] = []
    while matches or whole:
        current = "".join(chars)
        removed += [_cut(chars, origin, *unit) for unit in reversed(_units(current, matches, whole))]
        matches, whole = [match for match in find_volatile("".join(chars)) if not _touches(origin, match, kept)], []
    removed.sort(key=lambda match: (match.start, match.end))
    return "".join(chars), removed


def _line_matches(text: str, lines: Collection[int]) -> list[VolatileMatch]:
    """The non-blank lines of `text` numbered in `lines`, each a match of its content (indentation left out)."""
    found: list[VolatileMatch] = []
    start = 0
    for index, line in enumerate(text.split("\n")):
        content = line.strip()
        if index in lines and content:
            at = start + len(line) - len(line.lstrip())
            kind = VolatileKind.LINE
            found.append(VolatileMatch(at, start + len(line.rstrip()), kind, kind.value, content, content))
        start += len(line) + 1
    return found


def _units(text: str, matches: list[VolatileMatch], whole: list[VolatileMatch]) -> list[tuple[int, int, VolatileMatch]]:
    """The spans of `text` that move with `matches` and the lines `whole` (each with its caller's
    words: a line with the heading over it where its section is nothing else, as a value's line
    takes it, so a line moves the same whether memory or its value moved it), merged where they
    overlap, in order, each with the first match it holds."""
    values = [(match.start, match.end) for match in find_volatile(text)]
    spans = sorted(
        [
            *((*caller_words(text, match.start, match.end, values, _is_when(match)), match) for match in matches),
            *((*caller_words(text, match.start, match.end, values, False), match) for match in whole),
        ],
        key=lambda span: span[:2],
    )
    units: list[tuple[int, int, VolatileMatch]] = []
    for start, end, match in spans:
        if units and start < units[-1][1]:
            units[-1] = (units[-1][0], max(end, units[-1][1]), units[-1][2])
        else:
            units.append((start, end, match))
    return units


def _is_when(match: VolatileMatch) -> bool:
    """Whether `match` is a date or a time (it takes a weekday line beside it)."""
    return match.kind in _WHEN_KINDS or (
        match.kind is VolatileKind.LABELLED_VALUE and WHEN.fullmatch(match.value) is not None
    )


def _touches(origin: list[int], match: VolatileMatch, kept: set[tuple[int, int]]) -> bool:
    """Whether `match` (in `chars` coordinates) overlaps a kept match of the input: a cut beside a
    kept timestamp may make it read differently ("...21Z" + "the"), and it must stay whole."""
    start, end = origin[match.start], origin[match.end - 1] + 1
    return any(start < kept_end and kept_start < end for kept_start, kept_end in kept)


def _cut(chars: list[str], origin: list[int], start: int, end: int, match: VolatileMatch) -> VolatileMatch:
    """Delete `start:end` (in `chars` coordinates), the words of `match`, and tidy; return the cut
    in the input's coordinates."""
    cut = VolatileMatch(
        origin[start], origin[end - 1] + 1, match.kind, match.label, "".join(chars[start:end]), match.value
    )
    _delete(chars, origin, start, end)
    _tidy(chars, origin, start)
    return cut


def _skip_spaces_left(chars: list[str], index: int) -> int:
    while index > 0 and chars[index - 1] in _SPACES:
        index -= 1
    return index


def _skip_spaces_right(chars: list[str], index: int) -> int:
    while index < len(chars) and chars[index] in _SPACES:
        index += 1
    return index


def _delete(chars: list[str], origin: list[int], start: int, end: int) -> None:
    del chars[start:end]
    del origin[start:end]


def _delete_line(chars: list[str], origin: list[int], start: int, end: int) -> None:
    """Delete the line holding `start:end` (and nothing but whitespace around it) with one newline."""
    start, end = _skip_spaces_left(chars, start), _skip_spaces_right(chars, end)
    if end < len(chars) and chars[end] == "\r":
        end += 1
    if end < len(chars) and chars[end] == "\n":
        end += 1
    elif start > 0 and chars[start - 1] == "\n":
        start -= 1
        if start > 0 and chars[start - 1] == "\r":
            start -= 1
    _delete(chars, origin, start, end)


def _tidy(chars: list[str], origin: list[int], at: int) -> None:
    """Tidy the whitespace where a token was cut out at `at`."""
    left, right = _skip_spaces_left(chars, at), _skip_spaces_right(chars, at)
    line_start = left == 0 or chars[left - 1] == "\n"
    line_end = right == len(chars) or chars[right] in "\r\n"
    if line_start and line_end:
        _delete_line(chars, origin, left, right)
    elif line_start:
        _delete(chars, origin, at, right)  # keep the indentation, drop the space after the cut
    elif line_end or chars[right] in _TIGHT or chars[left - 1] in _OPENERS:
        _delete(chars, origin, left, right)
    elif left < at < right:
        _delete(chars, origin, at, right)
