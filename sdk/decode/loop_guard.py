"""The streaming repetition detector: notice a decode that has started to loop.

Decoding that reinforces its recent tokens falls into loops, the same span of text emitted
back-to-back until the token cap. Each looping token costs money and time and adds nothing, so the
stream guard feeds every text delta to a `LoopDetector` and, when it trips, closes the HTTP stream
(the server stops decoding) and ends the caller's stream with the provider's truncation signal.
Answers that repeat on purpose (identical records, table rows, log lines, unrolled code) are told
apart by the shape of the repeating unit (`sdk.decode.repetition`) and pass.

The detector is pure (no I/O) and cheap: it runs on every chunk of every stream. It keeps a bounded
window of recent text, looks only after enough new text arrived, finds candidate periods with
`str.rfind` of the recent suffix, and verifies them with slice comparisons (all in C).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from sdk._constants import (
    LOOP_CHECK_EVERY_CHARS,
    LOOP_DIVERSE_UNIT_LETTERS,
    LOOP_MAX_CANDIDATES,
    LOOP_MAX_PERIOD_CHARS,
    LOOP_MIN_REPEATS,
    LOOP_MIN_SPAN_CHARS,
    LOOP_PROBE_CHARS,
    LOOP_STRUCTURED_MIN_REPEATS,
    LOOP_STRUCTURED_MIN_SPAN_CHARS,
    LOOP_WINDOW_CHARS,
)
from sdk.decode.repetition import is_structured, wants_structured_output

if TYPE_CHECKING:
    from sdk.call import Call


@dataclass(frozen=True, slots=True)
class Loop:
    """What tripped the detector: `unit` repeated back-to-back `repeats` times (`chars` in all)."""

    unit: str
    repeats: int
    chars: int


class LoopDetector:
    """Trips when the streamed text ends in a span of prose that repeats back-to-back.

    Usage::

        detector = LoopDetector.for_call(call)  # or LoopDetector()
        for delta in deltas:
            if detector.feed(delta) is not None:
                break  # close upstream, end the stream as truncated

    Rule. For a period `p` (1 <= p <= max_period_chars) let `L(p)` be the length of the longest
    suffix of the text with period `p` (each character equals the one `p` later) and `a` the number
    of distinct letters (any script) in the repeating unit. A unit qualifies when, for some `p`::

        L(p) >= required(p) = max(min_repeats * p, ceil(min_span_chars / clamp(a, 1, DIVERSE)))

    where DIVERSE is `LOOP_DIVERSE_UNIT_LETTERS`. With the defaults (3, 480, 8): a sentence of 20
    to 256 characters with 8 or more distinct letters qualifies on the chunk that completes its
    third copy; a unit with few distinct letters needs a long span, so separators (`"=" * 80`),
    short rows of numbers and interjections pass: "=" and "0, " need 480 characters, "ha " 240,
    "the " 160.

    A qualifying unit that reads as records (`sdk.decode.repetition.is_structured`: table rows, log lines,
    code, JSON records, and with `structured_output` anything crossing JSON tokens) trips only once
    its run reaches `max(LOOP_STRUCTURED_MIN_REPEATS * p, LOOP_STRUCTURED_MIN_SPAN_CHARS)` (64
    copies and 4096 characters): the detector follows that run past its window, checking only that
    each new character equals the one `p` before (a chunk longer than the window starts the count
    over). Prose trips at once.

    A run lying wholly in the text that arrived since the last check (a whole answer in one delta, as
    a non-streaming server or a test's mock sends it) does not trip: it shows no decoding the guard
    could still stop; a loop that goes on extends it into the next delta, and trips there.

    Under structured output the detector knows whether the text is inside a JSON string, and there a
    unit of one character, spaces aside (`"0"`, `" "`, `"a"`, `"0 "`), never trips: a string of 3000
    zeros or spaces is a value (padding, a placeholder, a fixture), and a model stuck on one
    character inside a string is ended by the cap, as the bare client's would be. Outside strings
    such runs (whitespace between JSON tokens, `}}}}`) still trip after the long span.

    The check runs once at least `LOOP_CHECK_EVERY_CHARS` new characters arrived, or sooner when a
    candidate's run is that close to its `required(p)`: then the next check comes exactly when the
    run can reach it, so a loop is seen on the chunk that completes it. Candidate periods are the
    offsets at which the last `LOOP_PROBE_CHARS` characters recur, so a qualifying run must also be
    at least `p + LOOP_PROBE_CHARS` long, which every `required(p)` of the defaults is. A check tries
    at most `LOOP_MAX_CANDIDATES` of them, nearest first: a tail of one repeated character can recur
    at every offset of an earlier run, and a later check, with a more varied tail, finds the longer
    period. Memory is bounded by `window_chars` (plus one chunk).
    """

    __slots__ = (
        "_min_repeats",
        "_min_span",
        "_max_period",
        "_window",
        "_structured_output",
        "_text",
        "_pending",
        "_pending_chars",
        "_next_check",
        "_follow_period",
        "_follow_chars",
        "_follow_required",
        "_in_string",
        "_escaped",
        "_tripped",
    )

    def __init__(
        self,
        *,
        min_repeats: int = LOOP_MIN_REPEATS,
        min_span_chars: int = LOOP_MIN_SPAN_CHARS,
        max_period_chars: int = LOOP_MAX_PERIOD_CHARS,
        window_chars: int = LOOP_WINDOW_CHARS,
        structured_output: bool = False,
    ) -> None:
        if min_repeats < 2:
            raise ValueError(f"LoopDetector min_repeats must be at least 2, got {min_repeats!r}")
        if min_span_chars < 1:
            raise ValueError(f"LoopDetector min_span_chars must be positive, got {min_span_chars!r}")
        if max_period_chars < 1:
            raise ValueError(f"LoopDetector max_period_chars must be positive, got {max_period_chars!r}")
        needed = max(min_repeats * max_period_chars, min_span_chars)
        if window_chars < needed:
            raise ValueError(
                f"LoopDetector window_chars must hold the longest required span "
                f"max(min_repeats * max_period_chars, min_span_chars) = {needed}, got {window_chars!r}"
            )
        self._min_repeats = min_repeats
        self._min_span = min_span_chars
        self._max_period = max_period_chars
        self._window = window_chars
        self._structured_output = structured_output
        self._text = ""
        self._pending: list[str] = []
        self._pending_chars = 0
        self._next_check = LOOP_CHECK_EVERY_CHARS
        self._follow_period = 0  # period of the structured run being followed (0: none)
        self._follow_chars = 0
        self._follow_required = 0
        self._in_string = False  # structured output only: the text so far ends inside a JSON string ...
        self._escaped = False  # ... right after a backslash
        self._tripped: Loop | None = None

    @classmethod
    def for_call(cls, call: Call) -> LoopDetector:
        """The detector for one call: JSON-aware when the call asks for structured output."""
        return cls(structured_output=wants_structured_output(call.params))

    @property
    def tripped(self) -> Loop | None:
        """The loop that tripped the detector, or `None` while it has not."""
        return self._tripped

    def feed(self, text: str) -> Loop | None:
        """Take the next streamed text; return the `Loop` once tripped (and on every later call)."""
        if self._tripped is not None:
            return self._tripped
        if self._structured_output and (self._escaped or '"' in text or "\\" in text):
            self._in_string, self._escaped = _json_string_state(text, self._in_string, self._escaped)
        self._pending.append(text)
        self._pending_chars += len(text)
        if self._pending_chars < self._next_check:
            return None
        new = self._pending_chars
        window = (self._text + "".join(self._pending))[-self._window :]
        self._pending.clear()
        self._pending_chars = 0
        self._next_check = LOOP_CHECK_EVERY_CHARS
        if self._follow_period and self._follows(window, new):
            self._tripped = self._structured_loop(window)
        else:
            self._follow_period = 0
            if (found := self._find(window)) is not None and found[1] > new:  # reaching back before the new text
                self._tripped = self._judge(window, *found)
        self._text = "" if self._tripped is not None else window
        return self._tripped

    def _follows(self, text: str, new: int) -> bool:
        """Whether the `new` characters at the end of `text` continue the followed run."""
        period = self._follow_period
        if new + period > len(text) or not _has_period(text, period, new + period):
            return False
        self._follow_chars += new
        return True

    def _structured_loop(self, text: str) -> Loop | None:
        """The followed structured run as a `Loop` once it is long enough, else None."""
        period = self._follow_period
        if self._follow_chars < self._follow_required:
            return None
        repeats = self._follow_chars // period
        unit = _readable(text[len(text) - period :])
        return Loop(unit=unit, repeats=repeats, chars=repeats * period)

    def _judge(self, text: str, period: int, run: int) -> Loop | None:
        """The loop `text` ends in (`run` characters of period `period`) if it is prose; a structured
        one is followed instead, and a `Loop` only once it is long enough."""
        n = len(text)
        unit = text[n - run : n - run + period]
        if self._in_string and _is_filler(unit):
            return None  # a JSON string of one character: a value, not a loop
        if not is_structured(unit, self._structured_output):
            repeats = run // period
            return Loop(unit=_readable(unit), repeats=repeats, chars=repeats * period)
        self._follow_period = period
        self._follow_chars = run
        self._follow_required = max(LOOP_STRUCTURED_MIN_REPEATS * period, LOOP_STRUCTURED_MIN_SPAN_CHARS)
        return self._structured_loop(text)

    def _required(self, period: int, letters: int) -> int:
        """The run length at which a period with `letters` distinct letters qualifies."""
        diverse = min(max(letters, 1), LOOP_DIVERSE_UNIT_LETTERS)
        return max(self._min_repeats * period, -(-self._min_span // diverse))

    def _find(self, text: str) -> tuple[int, int] | None:
        """(period, run) of the first qualifying candidate, nearest first; arms `_next_check` for
        a candidate whose run is within `LOOP_CHECK_EVERY_CHARS` of qualifying."""
        n = len(text)
        probe_len = LOOP_PROBE_CHARS
        if n <= probe_len:
            return None
        probe = text[n - probe_len :]
        low = max(0, n - probe_len - self._max_period)
        end = n - 1
        for _ in range(LOOP_MAX_CANDIDATES):
            if (start := text.rfind(probe, low, end)) < 0:
                return None
            period = n - probe_len - start
            known = probe_len + period  # the rfind hit gives the period to this many characters
            near = max(known, self._min_repeats * period - LOOP_CHECK_EVERY_CHARS)  # shorter: too far to arm
            fails_at = n + 1  # a length known not to have the period (n + 1: none)
            if near > n or (near > known and not _has_period(text, period, near)):
                fails_at = min(near, n + 1)
            else:
                required = self._required(period, _distinct_letters(text[n - period :]))
                arm = max(near, required - LOOP_CHECK_EVERY_CHARS)  # a run this long arms the next check
                if arm >= min(required, n + 1):  # required <= near (known to have the period), or beyond the window
                    if required <= n:
                        return period, _periodic_suffix(text, period, required)
                elif arm > near and not _has_period(text, period, arm):
                    fails_at = arm
                elif required <= n and _has_period(text, period, required):
                    return period, _periodic_suffix(text, period, required)
                else:
                    run = _periodic_suffix(text, period, arm, below=min(required, n + 1))
                    self._next_check = min(self._next_check, required - run)
                    fails_at = run + 1
            end = start + probe_len - 1
            if period <= probe_len:
                # No other period recurs inside this run (Fine-Wilf), so search before it.
                run = _periodic_suffix(text, period, probe_len + period, below=fails_at)
                end = min(end, n - run + probe_len - 1)
        return None


def _json_string_state(text: str, inside: bool, escaped: bool) -> tuple[bool, bool]:
    """Whether JSON text continued by `text` ends inside a string, and right after a backslash there."""
    for char in text:
        if escaped:
            escaped = False
        elif char == "\\":
            escaped = inside
        elif char == '"':
            inside = not inside
    return inside, escaped


def _is_filler(unit: str) -> bool:
    """Whether `unit` is one character, spaces aside, and neither a quote nor a backslash (whose runs
    end or escape the string they are in)."""
    chars = set(unit) - {" "}
    return len(chars) <= 1 and not chars & {'"', "\\"}


def _distinct_letters(unit: str) -> int:
    """How many distinct letters (any script) `unit` has."""
    return sum(1 for char in set(unit) if char.isalpha())


def _has_period(text: str, period: int, length: int) -> bool:
    """Whether the last `length` characters of `text` have period `period`."""
    n = len(text)
    return text[n - length + period :] == text[n - length : n - period]


def _periodic_suffix(text: str, period: int, known: int, below: int | None = None) -> int:
    """The length of the longest suffix of `text` with period `period`, given `known` (< `below`) has it."""
    n = len(text)
    low = known
    if below is None:
        high = low
        while high < n:
            high = min(n, 2 * high)
            if not _has_period(text, period, high):
                break
            low = high
        else:
            return n
    else:
        high = below
    while high - low > 1:
        middle = (low + high) // 2
        if _has_period(text, period, middle):
            low = middle
        else:
            high = middle
    return low


def _readable(unit: str) -> str:
    """The rotation of `unit` that starts a line, else a word (`"the "`, not `" the"`), else `unit`."""
    for breaks in ("\n", " \t\r\f\v"):
        for index in range(len(unit)):  # unit[-1] precedes unit[0]: the unit is cyclic
            if unit[index - 1] in breaks and not unit[index].isspace():
                return unit[index:] + unit[:index]
    return unit
