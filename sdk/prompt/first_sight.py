"""Which volatile candidates move on first sight: a pure rule of the prompt's bytes.

A process that makes one call (a serverless function, a CLI agent, a batch worker per item) never
sees a second call of its prompt family, so a memory of what changed (`sdk.prompt.families`) never tells
it anything. Values whose shape says "this request" with high confidence therefore move on the
first call that carries them, and the same prompt gets the same decision in every process:

- a UUID, a date with a time of day, an epoch stamp (`VolatileKind.UUID`, `TIMESTAMP`, `EPOCH`); a
  date written out with a time but no seconds ("September 8, 2025, 9:41 Pacific") only where it
  names now, as a date does: a clock writes its seconds, a person writing a launch does not;
- a date that names the current day, in any written form: introduced as the current one ("The
  current date is Tuesday, March 17, 2026."), under a heading that names it, or today's by its
  value (`VolatileKind.DATE`, `sdk.prompt.dates`);
- a labelled value whose label names the request, not the content: a request, trace, span,
  correlation, session, run, conversation, message or event id, a session, a nonce, a timestamp,
  "generated at"; or "now", in any case, with a date or a time as its value (`Date: 3/17/2026`,
  `- date: 2026-03-17`, `Current time: 08:55 UTC`: `sdk.prompt.dates.NOW_LABEL`; a label written
  on more than one line labels a list of dated records and stays); or whose value
  holds one of the shapes above ("Session: 2026-12-02 08:55").

What stays for the memory (moved only once calls show it changes): hex and base64 runs and JWTs
(`NONCE`: a commit hash or a key id is the same on every call), and any candidate written as an
example: inside a fenced or inline code span, a JSON object or member line, an example section
(`<example>` ... `</example>`, a heading or a line that starts with "Example", up to the next
heading or blank line), or a sentence that introduces it as one ("e.g.", "ie.", "for example",
"such as", "format", "looks like", "in the form"). A wrong move costs the caller's words moved for
nothing, so the rule errs towards the memory. Versions, prices, knowledge cutoffs, policy dates
and dated model ids are no candidates at all (`sdk.prompt.volatile`, `sdk.prompt.dates`).
"""

from __future__ import annotations

import functools
import re
from collections import Counter

from sdk._constants import VOLATILE_SCAN_CACHE_SIZE
from sdk.prompt.dates import MONTH, NOW_LABEL, names_now, now_heading, today
from sdk.prompt.volatile import WHEN, VolatileKind, VolatileMatch, find_volatile

_BY_SHAPE = frozenset({VolatileKind.UUID, VolatileKind.TIMESTAMP, VolatileKind.EPOCH, VolatileKind.DATE})
_REQUEST_LABEL = re.compile(
    r"(?:x )?(?:(?:request|trace|span|correlation|session|run|conversation|message|event) ?id|session|nonce|timestamp"
    r"|generated (?:at|on)|(?:current|local|server|today'?s?) (?:date|time)(?: ?(?:and )?time)?|date ?(?:and )?time)"
)
_LABEL_SEPARATORS = re.compile(r"[ _-]+")
_FENCE = re.compile(r"^[ \t]*(?:```|~~~)", re.MULTILINE)
_EXAMPLE_TAG = re.compile(r"<(/?)[\w-]*examples?[\w-]*\b[^>]*>", re.IGNORECASE)
_HEADING = re.compile(r"^[ \t]*#{1,6}[ \t]")
_EXAMPLE_LINE = re.compile(r"^[ \t]*(?:#{1,6}[ \t]+|[-*][ \t]+|\*\*)?(?:few-shot[ \t]+)?examples?\b", re.IGNORECASE)
_JSON_MEMBER = re.compile(r'^[ \t]*"[^"\n]*"[ \t]*:')
_INTRODUCED = re.compile(
    r"\b(?:e\.?g\.|i\.?e\.|(?:eg|ie|for (?:example|instance)|examples?|such as|formats?|formatted|like|sample"
    r"|in the form|of the form|placeholder|template|pattern)\b)",
    re.IGNORECASE,
)
_SENTENCE_END = re.compile(r"[.!?](?:[ \t]|$)")
_SECONDS = re.compile(r"\d:[0-5]\d:[0-5]\d", re.ASCII)
_MONTH_NAME = re.compile(MONTH)


def moves_on_sight(text: str) -> tuple[bool, ...]:
    """For each match of `find_volatile(text)`, in order: whether it moves on first sight (see the module).

    A pure function of `text` and the day (`sdk.prompt.dates.today`), remembered per text as the
    scan is: a system prompt sent on every call is judged once a day.
    """
    return _judge(text, today()) if find_volatile(text) else ()


@functools.lru_cache(maxsize=VOLATILE_SCAN_CACHE_SIZE)
def _judge(text: str, now: int) -> tuple[bool, ...]:
    examples = _example_spans(text)
    found = find_volatile(text)
    labels = Counter(_label(match) for match in found if match.kind is VolatileKind.LABELLED_VALUE)
    return tuple(
        _by_shape(match, labels) and not _in_example(text, match, examples) and not _written_content(text, match, now)
        for match in found
    )


def _label(match: VolatileMatch) -> str:
    return _LABEL_SEPARATORS.sub(" ", match.label.lower())


def _by_shape(match: VolatileMatch, labels: Counter[str]) -> bool:
    """Whether `match` moves by its shape alone; `labels` counts the text's labels (a date label
    written more than once labels a list of dated records, not the current date)."""
    if match.kind in _BY_SHAPE:
        return True
    if match.kind is not VolatileKind.LABELLED_VALUE:
        return False
    label = _label(match)
    if _REQUEST_LABEL.fullmatch(label) is not None:
        return True
    if NOW_LABEL.fullmatch(match.label) and WHEN.fullmatch(match.value) and labels[label] == 1:
        return True
    return any(inner.kind in _BY_SHAPE for inner in find_volatile(match.value))


def _written_content(text: str, match: VolatileMatch, now: int) -> bool:
    """Whether a date written out with a time of day but no seconds ("September 8, 2025, 9:41
    Pacific", a launch in a list) is the caller's content: a clock writes its seconds, a person
    does not, so it moves on sight only where it names now (`sdk.prompt.dates.names_now`)."""
    if match.kind is not VolatileKind.TIMESTAMP or _SECONDS.search(match.text) or not _MONTH_NAME.search(match.text):
        return False
    line_start = text.rfind("\n", 0, match.start) + 1
    line_end = len(text) if (end := text.find("\n", match.end)) < 0 else end
    heading = now_heading(text, line_start) is not None
    return not names_now(text[line_start:line_end], match.start - line_start, match.end - line_start, heading, now)


def _example_spans(text: str) -> list[tuple[int, int]]:
    """The spans of `text` written as examples: fenced code, example tags, example sections."""
    spans: list[tuple[int, int]] = []
    fences = [match.start() for match in _FENCE.finditer(text)]
    spans += [(start, end) for start, end in zip(fences[::2], [*fences[1::2], len(text)])]
    depth, opened = 0, 0
    for tag in _EXAMPLE_TAG.finditer(text):
        if not tag[1]:
            depth, opened = depth + 1, opened if depth else tag.start()
        elif depth:
            depth -= 1
            if not depth:
                spans.append((opened, tag.end()))
    if depth:
        spans.append((opened, len(text)))
    position, section = 0, None
    for line in text.split("\n"):
        heading = _HEADING.match(line) is not None
        if section is not None and (heading or not line.strip()):
            spans.append((section, position))
            section = None
        if section is None and _EXAMPLE_LINE.match(line):
            section = position
        position += len(line) + 1
    if section is not None:
        spans.append((section, len(text)))
    return spans


def _in_example(text: str, match: VolatileMatch, spans: list[tuple[int, int]]) -> bool:
    """Whether `match` is written as an example: in an example span, code, JSON, or introduced as one."""
    if any(start <= match.start < end for start, end in spans):
        return True
    line_start = text.rfind("\n", 0, match.start) + 1
    line_end = text.find("\n", match.end)
    line = text[line_start : len(text) if line_end < 0 else line_end]
    before = text[line_start : match.start]
    if (
        before.count("`") % 2
        or _JSON_MEMBER.match(line)
        or text.count("{", 0, match.start) > text.count("}", 0, match.start)
    ):
        return True
    introduced = [marker.end() for marker in _INTRODUCED.finditer(before)]
    return (
        bool(introduced) and _SENTENCE_END.search(before, introduced[-1]) is None
    )  # in the sentence that introduces it
