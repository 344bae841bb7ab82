"""Volatile content: which bytes count, how they are cut with the caller's words around them, and that
cutting keeps everything else."""

from __future__ import annotations

import datetime
import uuid
from collections import Counter

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from sdk.prompt.dates import ordinals, today
from sdk.prompt.volatile import VolatileKind, VolatileMatch, cut_volatile, find_volatile, mask_volatile, note_lines

UUID, TIMESTAMP, EPOCH, NONCE, LINE = (
    VolatileKind.UUID,
    VolatileKind.TIMESTAMP,
    VolatileKind.EPOCH,
    VolatileKind.NONCE,
    VolatileKind.LABELLED_VALUE,
)

POSITIVE = [
    # (text around the token, the token, kind)
    ("id {} here", "550e8400-e29b-41d4-a716-446655440000", UUID),
    ("id {} here", "{550E8400-E29B-11D4-A716-446655440000}", UUID),
    ("v7 {}.", "01936b2e-5a4f-7c3d-8e9f-0a1b2c3d4e5f", UUID),
    ("at {}.", "2026-11-29T08:55:21Z", TIMESTAMP),
    ("at {} ok", "2026-11-29 08:55:21.123+01:00", TIMESTAMP),
    ("at {} ok", "2026-11-29T08:55", TIMESTAMP),
    ("at {} ok", "2026-11-29T08:55:21.123456", TIMESTAMP),
    ("at {} ok", "20261129T085521Z", TIMESTAMP),
    ("built {} ok", "Sun Nov 29 08:55:21 UTC 2026", TIMESTAMP),
    ("built {} ok", "Sun Nov 29 08:55:21 2026", TIMESTAMP),
    ("on {} ok", "29/11/2026 08:55", TIMESTAMP),
    ("on {} ok", "11/29/2026, 8:55:21 PM", TIMESTAMP),
    ("on {} ok", "29.11.2026 08:55", TIMESTAMP),
    ("on {}.", "Nov 29, 2026 8:55 AM", TIMESTAMP),
    ("on {}.", "Sunday, November 29, 2026 at 8:55 a.m.", TIMESTAMP),
    ("sent {} ok", "Sun, 29 Nov 2026 08:55:21 +0000", TIMESTAMP),
    ("sent {} ok", "29 Nov 2026 08:55:21 GMT", TIMESTAMP),
    ("ts {} ok", "1732870521", EPOCH),
    ("ts {} ok", "1732870521.123456", EPOCH),
    ("ts={},", "1732870521123", EPOCH),
    ("nonce {} ok", "a3f9c2e81b7d4e6f", NONCE),
    ("sha {} ok", "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08", NONCE),
    ("key {} ok", "0x1f2e3d4c5b6a79880f1e", NONCE),
    ("token {} ok", "Zx8Kq2Lm9Np4Rt7Vw1Yb3Cd", NONCE),
    ("token {} ok", "q7Vh0ZpX3kLmT9wRbN2cYe8=", NONCE),
    ("token {} ok", "k3J9_aX2-mQ7vL0pZr8WbT", NONCE),
    ("sig {} ok", "aB3+cD4/eF5gH6iJ7kL8mN9==", NONCE),
    (
        "jwt {} ok",
        "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
        NONCE,
    ),
]


@pytest.mark.parametrize(("around", "token", "kind"), POSITIVE)
def test_volatile_tokens_are_found_whole_with_their_kind(around: str, token: str, kind: VolatileKind) -> None:
    text = around.format(token)
    [match] = find_volatile(text)
    assert (match.kind, match.text, match.label) == (kind, token, kind.value)
    assert text[match.start : match.end] == token


LABELLED = [
    # (line, label, the match: label and value only, the value)
    ("Request ID: 7f3c9a2e41", "Request ID", "Request ID: 7f3c9a2e41", "7f3c9a2e41"),
    ("request_id=req_8f2k1", "request_id", "request_id=req_8f2k1", "req_8f2k1"),
    (
        "Trace-Id: 4bf92f3577b34da6a3ce929d0e0e4736",
        "Trace-Id",
        "Trace-Id: 4bf92f3577b34da6a3ce929d0e0e4736",
        "4bf92f3577b34da6a3ce929d0e0e4736",
    ),
    ("X-Request-Id: 12ab", "X-Request-Id", "X-Request-Id: 12ab", "12ab"),
    ("Timestamp: 1732870521", "Timestamp", "Timestamp: 1732870521", "1732870521"),
    ("Current time: 08:55 UTC", "Current time", "Current time: 08:55 UTC", "08:55 UTC"),
    (
        "Current date and time: Sunday 29 November, 08:55",
        "Current date and time",
        "Current date and time: Sunday 29 November, 08:55",
        "Sunday 29 November, 08:55",
    ),
    ("Date: 2026-11-29", "Date", "Date: 2026-11-29", "2026-11-29"),
    ("Today's date: 29 November 2026", "Today's date", "Today's date: 29 November 2026", "29 November 2026"),
    ("Session: 48213", "Session", "Session: 48213", "48213"),
    ("Session ID: s-20261129-0042", "Session ID", "Session ID: s-20261129-0042", "s-20261129-0042"),
    ("Nonce: 8812", "Nonce", "Nonce: 8812", "8812"),
    ("- **Request ID:** 7f3c9a2e41", "Request ID", "**Request ID:** 7f3c9a2e41", "7f3c9a2e41"),
    ("    Correlation-ID: 42-17", "Correlation-ID", "Correlation-ID: 42-17", "42-17"),
    ("session_id=8812 user=alice path=/v1/chat", "session_id", "session_id=8812", "8812"),
    (
        "Current time: Sun Nov 29 08:55:21 UTC 2026 (server clock)",
        "Current time",
        "Current time: Sun Nov 29 08:55:21 UTC 2026",
        "Sun Nov 29 08:55:21 UTC 2026",
    ),
]


@pytest.mark.parametrize(("line", "label", "text", "value"), LABELLED)
def test_a_labelled_value_is_found_as_its_label_and_value_and_wins_over_their_tokens(
    line: str, label: str, text: str, value: str
) -> None:
    source = f"Intro line.\n{line}\nOutro line."
    [match] = find_volatile(source)
    assert (match.kind, match.label, match.text, match.value) == (LINE, label, text, value)
    assert source[match.start : match.end] == text


def test_a_label_after_a_sentence_takes_its_value_and_leaves_the_sentences_after_it() -> None:
    text = "You are a helpful assistant. Request ID: 7f3c9a2e41. Be brief and cite sources.\nBe kind."
    [match] = find_volatile(text)
    assert (match.kind, match.text) == (LINE, "Request ID: 7f3c9a2e41")
    assert cut_volatile(text)[0] == "You are a helpful assistant. Be brief and cite sources.\nBe kind."


NEGATIVE = [
    "Founded on 2019-05-01 in Berlin.",
    "Released on Nov 29, 2019.",
    "The meeting is at 08:55 every day.",
    "Python 3.11.7, numpy 1.26.4, version 2.0.0-rc1.",
    "It costs $1,299.99 or 1299.99 EUR; call +1 (555) 123-4567 or 555-123-4567.",
    "Phone 2125551234, order 1234567, ISBN 9781234567897, count 12345678901.",
    "Use max_tokens=4096 and temperature=0.7 on port 8080.",
    "getUserProfileByIdentifier2, XMLHttpRequest2Handler, convertUtf8ToUtf16String",
    "src/components/Button2/index.tsx and docs/v2/API/Auth/Tokens/list",
    "https://github.com/openai/openai-python/blob/main/README.md",
    "HEX = '0123456789abcdef'; B64 = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/'",
    "deadbeefcafebabe is a word-ish hex without digits; 1234567890123456 is a number.",
    "MAX = 0x7fffffffffffffff; MASK = 0b1111111111111111111111; x = 1.000000000000000000e+00",
    "LineOver1DRangeSeries, _OP_NO_SSLv2_OR_SSLv3, TestAssignValues_1009_UCS2, AmazonFreeRTOS-TI-CC3220SF",
    "timestamp: int = 0\nsession_id: str = 'abc1'\nrequest_id = str(uuid.uuid4())",
    "Date: see below.\nSession: morning keynote\nTime: O(n log n)",
    "    client.send(\n        request_id=request_id,\n        session=session2,\n    )",
    '{"request_id": "req_123", "created_at": "2019-05-01"}',
    "The the the extraordinarily long word antidisestablishmentarianism appears.",
]


@pytest.mark.parametrize("text", NEGATIVE)
def test_ordinary_text_versions_prices_and_identifiers_are_not_volatile(text: str) -> None:
    assert find_volatile(text) == []


CUTS = [
    # (input, output after the cut, removed texts: the caller's words around each value, verbatim)
    (
        "You are Ada. Session started at 2026-11-29T08:55:21Z, please be brief. Be kind.",
        "You are Ada. Be kind.",
        ["Session started at 2026-11-29T08:55:21Z, please be brief."],
    ),
    (
        "Call me (550e8400-e29b-41d4-a716-446655440000) later. Bye.",
        "Bye.",
        ["Call me (550e8400-e29b-41d4-a716-446655440000) later."],
    ),
    ("See e.g. item 1732870521 here. Next.", "Next.", ["See e.g. item 1732870521 here."]),
    (
        "It is Sunday, November 29, 2026 at 8:55 a.m. Be brief.",
        "Be brief.",
        ["It is Sunday, November 29, 2026 at 8:55 a.m."],
    ),
    ("1. Ship by 1732870521 at the latest.\n2. Be kind.", "2. Be kind.", ["1. Ship by 1732870521 at the latest."]),
    ("- Request ID: 7f3c9a2e41. Be brief.", "- Be brief.", ["Request ID: 7f3c9a2e41."]),
    ("| run | 1732870521 |\n|---|---|", "|---|---|", ["| run | 1732870521 |"]),
    (
        "## Session\n550e8400-e29b-41d4-a716-446655440000\n\n## Rules\nBe kind.",
        "\n## Rules\nBe kind.",
        ["## Session\n550e8400-e29b-41d4-a716-446655440000"],
    ),
    ("Date: 2026-11-29\nDay of Week: Sunday\nBe kind.", "Be kind.", ["Date: 2026-11-29\nDay of Week: Sunday"]),
    ("a 1732870521 b", "", ["a 1732870521 b"]),
    ("trailing 1732870521\nnext", "next", ["trailing 1732870521"]),
    ("    1732870521 indented\nnext", "next", ["1732870521 indented"]),
    ("before\n  1732870521  \nafter", "before\nafter", ["1732870521"]),
    ("Intro.\nRequest ID: 7f3c9a2e41\nOutro.", "Intro.\nOutro.", ["Request ID: 7f3c9a2e41"]),
    ("Intro.\nRequest ID: 7f3c9a2e41", "Intro.", ["Request ID: 7f3c9a2e41"]),
    ("Request ID: 7f3c9a2e41\r\nOutro.", "Outro.", ["Request ID: 7f3c9a2e41"]),
    ("ids: 1732870521, 1732870522 and 1732870523. Done.", "Done.", ["ids: 1732870521, 1732870522 and 1732870523."]),
    ("on 2026-11-29 550e8400-e29b-41d4-a716-446655440000 08:55 ok", "", None),
]


@pytest.mark.parametrize(("text", "expected", "removed"), CUTS)
def test_cutting_removes_matches_with_tidy_whitespace(text: str, expected: str, removed: list[str] | None) -> None:
    rest, matches = cut_volatile(text)
    assert rest == expected
    if removed is not None:
        assert [match.text for match in matches] == removed
    assert find_volatile(rest) == []
    for match in matches:
        assert text[match.start] == match.text[0]
        assert text[match.end - 1] == match.text[-1]


def test_mask_replaces_each_match_with_its_label_placeholder() -> None:
    text = "Request ID: 7f3c\nuser 550e8400-e29b-41d4-a716-446655440000 at 2026-11-29T08:55:21Z."
    assert mask_volatile(text) == "<Request ID>\nuser <uuid> at <timestamp>."
    assert mask_volatile(text.replace("7f3c", "9a9b").replace("08:55", "09:10")) == mask_volatile(text)


def test_note_lines_are_the_callers_words_verbatim_with_no_label_made_up() -> None:
    line = VolatileMatch(0, 29, LINE, "Request ID", "- **Request ID:** 7f3c9a2e41.", "7f3c9a2e41")
    sentence = "You handle request 550e8400-e29b-41d4-a716-446655440000 for billing."
    token = VolatileMatch(0, len(sentence), UUID, "uuid", sentence, "550e8400-e29b-41d4-a716-446655440000")
    heading = VolatileMatch(0, 28, VolatileKind.DATE, "date", "### Current Date  \n\n3/17/2026", "3/17/2026")
    assert note_lines(line) == ["- **Request ID:** 7f3c9a2e41."]
    assert note_lines(token) == [sentence]
    assert note_lines(heading) == ["### Current Date", "3/17/2026"]


SYSTEM_PROMPT = """\
You are Ada, the support assistant of Northwind Analytics (founded on 2019-05-01 in Lisbon).
Answer in the user's language, in at most 200 words, with a friendly and precise tone.

## Rules
1. Never invent prices: the Team plan costs $49.00 per seat per month (billed yearly: $470.40).
2. The API is at https://api.northwind.example/v2/ and the status page at status.northwind.example.
3. Support hours are 09:00 to 17:30 (Lisbon time), Monday to Friday; phone +351 21 123 4567.
4. Our SDKs: Python 3.9+ (northwind==4.12.0), Node 18+ (@northwind/sdk 4.12.0), Go 1.21+.
5. Refer to tickets as NW-12345 and to invoices as INV-2024-000123.
6. Rate limits: 600 requests per minute, 1,000,000 tokens per day on the Team plan.
7. When unsure, say so and offer to open a ticket; escalate outages to on-call.
"""

TOOL_DESCRIPTION = """\
Search the knowledge base and return the most relevant articles.

Parameters:
- query (string, required): what to look for, in plain words.
- limit (integer, optional): how many articles to return, 1 to 20 (default 5).
- since (string, optional): only articles updated on or after this date, as YYYY-MM-DD.
- locale (string, optional): an IETF tag such as en-US or pt-PT.

Returns a JSON array of objects: {"id": "kb_1234", "title": "...", "updated": "2024-03-01",
"score": 0.87}. Scores below 0.35 are dropped. Use this tool before answering any product question,
and cite the article ids you used as [kb_1234].
"""

CODE = '''\
import hashlib
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    max_attempts: int = 3
    initial_delay_seconds: float = 0.5
    max_delay_seconds: float = 8.0
    retry_on_status: tuple[int, ...] = (408, 409, 429, 500, 502, 503, 504)
    labels: dict[str, str] = field(default_factory=dict)

    def delay(self, attempt: int) -> float:
        """Exponential backoff: min(max_delay, initial * 2 ** (attempt - 1))."""
        return min(self.max_delay_seconds, self.initial_delay_seconds * 2 ** (attempt - 1))


def fingerprint(segments: list[bytes]) -> str:
    digest = hashlib.sha256()
    for segment in segments:
        digest.update(len(segment).to_bytes(8, "big"))
        digest.update(segment)
    return digest.hexdigest()[:16]


class HttpClientWithRetries2:
    def __init__(self, base_url: str = "http://localhost:8080/v1", timeout: float = 30.0) -> None:
        self.base_url = base_url
        self.timeout = timeout
        self.request_id = None
        self.session = None
'''

CORPUS = {"system prompt": SYSTEM_PROMPT, "tool description": TOOL_DESCRIPTION, "code": CODE}


@pytest.mark.parametrize("name", CORPUS)
def test_realistic_prompts_without_volatile_bytes_have_none(name: str) -> None:
    assert find_volatile(CORPUS[name]) == []
    assert cut_volatile(CORPUS[name]) == (CORPUS[name], [])


VOLATILE_SAMPLES = [
    "550e8400-e29b-41d4-a716-446655440000",
    "{550E8400-E29B-11D4-A716-446655440000}",
    "2026-11-29T08:55:21Z",
    "2026-11-29 08:55:21.123+01:00",
    "Sun Nov 29 08:55:21 UTC 2026",
    "29/11/2026 08:55",
    "Nov 29, 2026 8:55 AM",
    "Sun, 29 Nov 2026 08:55:21 +0000",
    "1732870521",
    "1732870521123",
    "a3f9c2e81b7d4e6f0a9b",
    "Zx8Kq2Lm9Np4Rt7Vw1Yb3Cd",
    "\nRequest ID: 7f3c9a2e41\n",
    "\nrequest_id=req_8f2k1\n",
    "\nCurrent time: 08:55\n",
]

words = st.sampled_from(
    [
        "the",
        "cache",
        "prefix",
        "tokens",
        "a",
        "(",
        ")",
        "[",
        "]",
        ",",
        ".",
        ":",
        " ",
        "  ",
        "\n",
        "\t",
        "-",
        "v1.2.3",
        "$19.99",
        "2019-05-01",
        "08:55",
        "id",
        "x=1",
        "Date",
        "Request ID:",
        "0x",
        "ff",
        "ABC",
        "42",
    ]
)
pieces = st.one_of(words, words, words, st.sampled_from(VOLATILE_SAMPLES), st.text(max_size=12))
texts = st.lists(pieces, max_size=40).map("".join)


def non_whitespace(text: str) -> Counter[str]:
    return Counter(char for char in text if not char.isspace())


@settings(max_examples=400, deadline=None)
@given(text=texts)
def test_cutting_is_idempotent(text: str) -> None:
    rest, _ = cut_volatile(text)
    assert find_volatile(rest) == []
    assert cut_volatile(rest) == (rest, [])


@settings(max_examples=400, deadline=None)
@given(text=texts)
def test_cutting_keeps_every_non_whitespace_character(text: str) -> None:
    rest, matches = cut_volatile(text)
    assert non_whitespace(rest + "".join(match.text for match in matches)) == non_whitespace(text)
    for found in find_volatile(text):
        assert any(found.text in match.text for match in matches)


@settings(max_examples=200, deadline=None)
@given(
    name=st.sampled_from(sorted(CORPUS)),
    at=st.integers(min_value=0),
    sample=st.sampled_from(VOLATILE_SAMPLES),
)
def test_a_token_injected_into_a_realistic_prompt_moves_with_its_own_words_and_nothing_else(
    name: str, at: int, sample: str
) -> None:
    prompt = CORPUS[name]
    lines = prompt.split("\n")
    index = at % len(lines)
    lines[index] = f"{lines[index]} {sample.strip()}" if "\n" not in sample else f"{lines[index]}{sample.rstrip()}"
    text = "\n".join(lines)
    rest, [match] = cut_volatile(text)
    assert sample.strip() in match.text and text[match.start : match.end] == match.text  # verbatim, whole
    assert non_whitespace(rest + match.text) == non_whitespace(text)
    assert "\n" not in match.text.strip() or lines[index - 1].lstrip().startswith("#")  # its line, or a heading over it


@settings(max_examples=200, deadline=None)
@given(text=texts)
def test_find_returns_ordered_non_overlapping_matches_that_mask_consistently(text: str) -> None:
    matches = find_volatile(text)
    for before, after in zip(matches, matches[1:]):
        assert before.end <= after.start
    for match in matches:
        assert text[match.start : match.end] == match.text
    masked = mask_volatile(text)
    assert all(f"<{match.label}>" in masked for match in matches)


def test_a_fresh_uuid_and_timestamp_each_call_cut_to_the_same_prefix() -> None:
    prompts = [
        f"Request ID: {uuid.uuid4()}\nNow: 2026-11-29T08:{minute:02d}:00Z\n{SYSTEM_PROMPT}" for minute in range(3)
    ]
    rests = {cut_volatile(prompt)[0] for prompt in prompts}
    assert len(rests) == 1


def test_kept_matches_stay_in_place_and_only_the_others_are_cut() -> None:
    text = (
        "Request ID: 7f3c9a2e41\nFile tickets in project 550e8400-e29b-41d4-a716-446655440000. "
        "Reply before 2026-11-29T08:55:21Z."
    )
    rest, removed = cut_volatile(text, keep={1})
    assert rest == "File tickets in project 550e8400-e29b-41d4-a716-446655440000."
    assert [match.text for match in removed] == ["Request ID: 7f3c9a2e41", "Reply before 2026-11-29T08:55:21Z."]
    assert cut_volatile(text, keep={0, 1, 2}) == (text, [])


def test_a_kept_match_in_the_sentence_of_a_moving_one_moves_with_the_sentence_never_split_from_it() -> None:
    text = "Be kind.\nFile tickets in project 550e8400-e29b-41d4-a716-446655440000 from 2026-11-29T08:55:21Z. Be brief."
    rest, [removed] = cut_volatile(text, keep={0})
    assert rest == "Be kind.\nBe brief."
    assert removed.text == "File tickets in project 550e8400-e29b-41d4-a716-446655440000 from 2026-11-29T08:55:21Z."


@settings(max_examples=300, deadline=None)
@given(text=texts, keep=st.sets(st.integers(0, 12)))
@example(  # a cut beside a kept timestamp glued it to "the": it must still stay whole
    text="550e8400-e29b-41d4-a716-446655440000{550E8400-E29B-11D4-A716-446655440000}2026-11-29T08:55:21Z"
    "{550E8400-E29B-11D4-A716-446655440000}the",
    keep={2},
)
def test_cutting_with_kept_matches_keeps_each_of_them_and_every_other_character(text: str, keep: set[int]) -> None:
    rest, removed = cut_volatile(text, keep)
    assert non_whitespace(rest + "".join(match.text for match in removed)) == non_whitespace(text)
    found = find_volatile(text)
    for index, match in enumerate(found):
        if index not in keep:
            assert any(cut.start <= match.start and match.end <= cut.end for cut in removed)
        elif not any(cut.start <= match.start and match.end <= cut.end for cut in removed):
            assert match.text in rest  # kept in place, unless a moving value's sentence took it along


lines_of_pieces = st.lists(st.lists(pieces, max_size=8).map("".join), max_size=8).map("\n".join)


@settings(max_examples=300, deadline=None)
@given(text=lines_of_pieces)
def test_scanning_line_by_line_finds_exactly_what_one_scan_of_the_whole_text_finds(text: str) -> None:
    from sdk.prompt.volatile import _scan_line  # the single-pass scan, applied to the whole text

    assert find_volatile(text) == list(_scan_line(text, today()))


@settings(max_examples=200, deadline=None)
@given(text=lines_of_pieces, lines=st.sets(st.integers(0, 8)))
def test_cutting_named_lines_moves_each_whole_and_keeps_every_other_character(text: str, lines: set[int]) -> None:
    rest, removed = cut_volatile(text, lines=lines)
    assert non_whitespace(rest + "".join(match.text for match in removed)) == non_whitespace(text)
    for index, line in enumerate(text.split("\n")):
        if index in lines and line.strip():
            assert any(line.strip() in cut.text for cut in removed)  # whole, never split
    assert find_volatile(rest) == []


@pytest.mark.parametrize(
    ("written", "days"),
    [
        ("2026-03-17", [(2026, 3, 17)]),
        ("2026/03/17", [(2026, 3, 17)]),
        ("3/17/2026", [(2026, 3, 17)]),
        ("17/03/2026", [(2026, 3, 17)]),
        ("17.03.2026", [(2026, 3, 17)]),
        ("3/4/2026", [(2026, 3, 4), (2026, 4, 3)]),  # ambiguous: both readings
        ("March 17, 2026", [(2026, 3, 17)]),
        ("Tue Mar 17 2026", [(2026, 3, 17)]),
        ("Tuesday, 17 March 2026", [(2026, 3, 17)]),
        ("the 17th of March, 2026", [(2026, 3, 17)]),
        ("Mar. 17th 2026 at 7:05 PM", [(2026, 3, 17)]),
        ("2026-02-30", []),
    ],
)
def test_a_written_date_means_the_days_it_can_mean(written: str, days: list[tuple[int, int, int]]) -> None:
    assert ordinals(written) == {datetime.date(*day).toordinal() for day in days}
