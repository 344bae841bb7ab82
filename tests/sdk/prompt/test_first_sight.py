"""First sight, by shape: a corpus that guards both sides of `sdk.prompt.first_sight`.

Table-driven. Each volatile pattern (a UUID, date-times with a time of day in four forms, epoch
seconds and milliseconds, labelled request / trace / session / run ids, the current time, date and
timestamp, a log-style `request_id=`) sits in a real-shaped system prompt at the start, mid-line,
at the end of a line and on a line of its own: one call of a fresh client (a process of its own)
moves it to the note, the label with it and every other word of the caller in place, and two
processes with different values send the same system prompt. Each look-alike (versions, prices,
plain dates in policy text, phone numbers, SKUs, commit hashes in code, example timestamps in a
JSON schema, ids in few-shot examples, ...) stays where it was written, on the first call and on
every call that repeats it.
"""

from __future__ import annotations

import datetime
import functools
import random
import uuid
from collections.abc import Callable
from typing import Any

import pytest

import sdk
from sdk.adapters import adapter_for
from sdk.call import Api, Provider
from sdk.pipeline import Pipeline
from sdk.prompt.canonical import NOTE_CLOSE, NOTE_OPEN


def _moment() -> datetime.datetime:
    start = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
    return start + datetime.timedelta(seconds=random.randrange(300 * 24 * 3600))


# (name, a fresh value of the pattern, with its label where it has one)
PATTERNS: list[tuple[str, Callable[[], str]]] = [
    ("uuid", lambda: str(uuid.uuid4())),
    ("iso 8601", lambda: _moment().isoformat(timespec="seconds")),
    ("iso 8601 with a Z", lambda: _moment().strftime("%Y-%m-%dT%H:%M:%SZ")),
    ("rfc 2822", lambda: _moment().strftime("%a, %d %b %Y %H:%M:%S +0000")),
    ("epoch seconds", lambda: str(int(_moment().timestamp()))),
    ("epoch milliseconds", lambda: str(int(_moment().timestamp() * 1000))),
    ("request id", lambda: f"Request ID: {uuid.uuid4()}"),
    ("trace id", lambda: f"Trace ID: {uuid.uuid4().hex}"),
    ("session id", lambda: f"Session ID: sess_{random.randrange(10**9, 10**10)}"),
    ("run id", lambda: f"Run ID: run-{random.randrange(10**5, 10**6)}"),
    ("current time", lambda: f"Current time: {_moment().strftime('%H:%M:%S')} UTC"),
    ("current date", lambda: f"Current date: {_moment().date().isoformat()}"),
    ("timestamp", lambda: f"Timestamp: {_moment().isoformat(timespec='milliseconds')}"),
    ("today's date", lambda: f"Today's date: {_moment().strftime('%B %d, %Y')}"),
    ("log-style request id", lambda: f"request_id={uuid.uuid4().hex[:12]}"),
]

# (position, (template, the caller's words that move with the value)): `{v}` is the value; the rest stays as written
POSITIONS: dict[str, tuple[str, str]] = {
    "start": (
        "{v}\nYou are the support assistant for Acme Cloud, a hosting provider.\n"
        "Answer billing and outage questions. Escalate anything about data loss to a human.\n"
        "Never promise a refund; quote the refund policy instead.",
        "{v}",
    ),
    "mid-line": (
        "You are Ada, the travel desk's agent. You work for one traveller; {v} and you answer in English only. "
        "Book trains before flights when the trip is under 600 km.\nKeep answers under 120 words.",
        "You work for one traveller; {v} and you answer in English only.",
    ),
    "end of line": (
        "# Role\nYou are a careful SQL assistant for the analytics team.\n"
        "# Context\nThe warehouse is Postgres 16; schemas: sales, marketing; {v}\n"
        "# Rules\nOnly write SELECT statements. Explain each join in one sentence.",
        "# Context\nThe warehouse is Postgres 16; schemas: sales, marketing; {v}",  # the heading of its section too
    ),
    "own line": (
        "You are the on-call assistant for the payments platform.\n"
        "Summarise alerts, link runbooks, and propose one next step.\n"
        "{v}\nIf an alert mentions card data, stop and page security.",
        "{v}",
    ),
}
CASES = [(pattern, position) for pattern in PATTERNS for position in POSITIONS]


def _sent(system: str, pipeline: Pipeline | None = None) -> tuple[str, list[Any]]:
    """The system prompt and turns a wrapped client's pipeline sends for `system` (a fresh pipeline: a
    process of its own)."""
    adapter = adapter_for(Api.CHAT)
    messages = [{"role": "system", "content": system}, {"role": "user", "content": "Hello"}]
    call = adapter.to_call({"model": "m", "messages": messages}, Provider.OPENAI)
    (pipeline or Pipeline(sdk.Policy())).prepare(call)
    out = adapter.to_kwargs(call)
    return out["messages"][0]["content"], out["messages"][1:]


def test_the_corpus_holds_sixty_prompts_with_every_pattern_in_every_position_and_forty_look_alikes():
    assert len(CASES) >= 60 and len(LOOK_ALIKES) >= 40
    assert {position for _, position in CASES} == {"start", "mid-line", "end of line", "own line"}


@pytest.mark.parametrize(
    ("pattern", "position"), CASES, ids=[f"{name} at the {position}" for (name, _), position in CASES]
)
def test_a_volatile_value_moves_on_the_first_call_of_a_process_with_its_own_words_and_nothing_else(
    pattern: tuple[str, Callable[[], str]], position: str
):
    _, fresh = pattern
    template, words = POSITIONS[position]
    value, other = fresh(), fresh()
    system, turns = _sent(template.format(v=value))
    assert value not in system and _sent(template.format(v=other))[0] == system  # the same bytes in every process
    [turn] = turns
    assert turn["content"].startswith(f"Hello\n\n{NOTE_OPEN}\n") and turn["content"].endswith(NOTE_CLOSE)
    note = turn["content"][len(f"Hello\n\n{NOTE_OPEN}\n") : -len(NOTE_CLOSE)]
    assert note == words.format(v=value) + "\n"  # the caller's words, verbatim: no label made up, no lead-in left
    assert system == template.replace(words + "\n", "").replace(" " + words, "").format(v="")  # the rest, as written


LOOK_ALIKES: dict[str, str] = {
    "a version": "You are the assistant for the Acme CLI v2.3.1; mention the version when asked about features.",
    "two runtime versions": "Python 3.11.4 and Node 20.10.0 are installed in the sandbox.",
    "a dated model name": "The default model is gpt-4o-2024-08-06; never suggest another.",
    "a pinned package": "Tell users to run `pip install kvwise==0.4.2` before anything else.",
    "prices": "The Pro plan costs $19.99 a month; Team is $1,299.00 a year, billed in advance.",
    "a revenue figure": "Q3 2024 revenue was $4.2M; do not share it outside the finance team.",
    "a policy date": "Orders placed after 2024-06-01 can be returned within 30 days of delivery.",
    "an incident date": "The outage on 2023-11-05 taught us to confirm every restore with the customer.",
    "a date labelled as another's": "You are a legal assistant.\nContract date: 2024-03-01\nJurisdiction: Portugal.",
    "a date-based api version": "Send the header anthropic-version: 2023-06-01 on every request you draft.",
    "a month and year": "Prices change on March 1, 2025; quote the current ones until then.",
    "a us phone number": "Support line: +1 (415) 555-0100, weekdays 9 to 5 Pacific.",
    "a toll-free number": "Customers can call 1-800-555-0199 or email help@acme.example.",
    "a uk phone number": "London office: +44 20 7946 0958.",
    "a portuguese phone number": "Lisbon desk: +351 912 345 678, in Portuguese or English.",
    "a sku": "SKU-4471-BX is discontinued; suggest SKU-4480-BX instead.",
    "an isbn": "Cite the style guide, ISBN 978-3-16-148410-0, for every formatting rule.",
    "an iban": "Refunds go to IBAN DE89 3704 0044 0532 0130 00 only.",
    "a vat number": "Our VAT number is PT123456789; print it on every invoice you draft.",
    "a postcode": "Returns go to Rua Augusta 1, 1000-001 Lisboa.",
    "coordinates": "The warehouse is at 38.7223, -9.1393.",
    "office hours": "Office hours are 09:00-17:30 CET, Monday to Friday.",
    "a cut-off time": "The cut-off is 23:59 on the last day of the month.",
    "a cve": "Mention CVE-2021-44228 (Log4Shell) whenever Java logging comes up.",
    "an error code": "Error code 0x80070005 means access denied; suggest running as administrator.",
    "an upload limit": "The largest upload is 1048576 bytes.",
    "an order number format": "Order numbers are 10 digits, like 1234567890; ask for one before looking anything up.",
    "a commit hash in a code fence": (
        "To roll back, run:\n```\ngit revert 9fceb02d0ae598e95dc970b74767f19372d61af8\n```\nThen redeploy."
    ),
    "a commit hash in inline code": (
        "The last good build is `git checkout 4bf92f3577b34da6a3ce929d0e0e4736`; never go older."
    ),
    "a json example with a timestamp": (
        'Reply with JSON only, e.g. {"created_at": "2024-01-15T10:30:00Z", "status": "open"}.'
    ),
    "a json schema with an example timestamp": (
        'Your answer must match this schema:\n{\n  "type": "object",\n  "properties": {\n'
        '    "due": {"type": "string", "format": "date-time", "example": "2024-01-15T10:30:00Z"},\n'
        '    "ticket": {"type": "string", "example": "550e8400-e29b-41d4-a716-446655440000"}\n  }\n}'
    ),
    "a json member line": 'Use these defaults:\n  "window_start": "2024-01-01T00:00:00Z",\n  "window_days": 30',
    "a timestamp format": "Timestamps look like 2024-01-15T10:30:00Z in our logs; quote them exactly.",
    "an iso example": "Write dates in ISO 8601, e.g. 2024-01-15T10:30:00+02:00.",
    "an id format": "Ticket ids have the format 3f2a8c1e-9b4d-4e7a-8f1c-2d5e6a7b8c9d.",
    "a sample log line": "Sample log line: `2024-01-15T10:30:00Z INFO request_id=abc123 started`.",
    "a tool argument example": "The search tool takes a since argument such as 2024-01-15T00:00:00Z.",
    "few-shot ids in example tags": (
        "You handle cancellations.\n<example>\n"
        "User: Cancel subscription 9c1d7e2a-4b3f-4a6e-8d2c-1f0e9a8b7c6d, please.\n"
        "Assistant: Done: 9c1d7e2a-4b3f-4a6e-8d2c-1f0e9a8b7c6d is cancelled as of 2024-02-01 10:00 UTC.\n"
        "</example>\nBe brief."
    ),
    "few-shot under an examples heading": (
        "## Rules\nAlways confirm the order id.\n## Examples\nUser: Where is 550e8400-e29b-41d4-a716-446655440000?\n"
        "Assistant: It shipped on Mon, 15 Jan 2024 10:30:00 +0000.\n## Tone\nFriendly."
    ),
    "an example paragraph": (
        "Example:\nInput: Session ID: sess_1234567890 started 2024-01-15 10:30\n"
        "Output: one session, started in the morning.\n\n"
        "Now summarise the user's sessions."
    ),
    "a markdown table of releases": "| Release | Date |\n|---|---|\n| 1.2.0 | 2024-01-15 |\n| 1.3.0 | 2024-03-02 |",
    "an example uuid introduced with ie.": (
        "Reference ids use the UUID format, ie. 550e8400-e29b-41d4-a716-446655440000, always lowercase."
    ),
    "an example uuid introduced with i.e.": (
        "Quote the trace id as printed (i.e. 4bf92f35-77b3-4da6-a3ce-929d0e0e4736)."
    ),
    "a knowledge cutoff": "Your knowledge cutoff is 2024-06; say so when asked about later events.",
    "a knowledge cutoff date": "Knowledge cutoff: 2024-06-01. Reliable knowledge cutoff: April 2024.",
    "a policy effective date": "This policy is effective January 1, 2025 for every customer in the EU.",
    "dated model ids": "Route hard questions to claude-3-5-sonnet-20241022 and easy ones to gpt-4o-2024-08-06.",
    "prices as of a date": "Prices as of March 1, 2025: Basic $9, Pro $29.",
    "a last-updated label": "Last updated: March 17, 2025\nFollow the refund rules below.",
    "an example sentence naming the date": "Say the date as in this example: e.g. 'Today is January 15, 2024.'",
    "a knowledge date introduced as current": "Your training data is current as of January 15, 2024.",
    "opening hours in local time": "Opening hours in local time: 09:00 to 17:00. The time is 09:00-17:30 on Fridays.",
    "a yaml list of dated releases": "Releases:\n- name: 1.2.0\n  date: 2024-01-15\n- name: 1.3.0\n  date: 2024-03-02",
}


@pytest.mark.parametrize("name", sorted(LOOK_ALIKES))
def test_a_look_alike_stays_where_it_was_written_on_the_first_call_and_on_every_repeat(name: str):
    system = LOOK_ALIKES[name]
    pipeline = Pipeline(sdk.Policy())
    for _ in range(3):  # the first call of a process, then repeats: the same bytes, no note
        assert _sent(system, pipeline) == (system, [{"role": "user", "content": "Hello"}])


DAYS = (datetime.date(2026, 3, 17), datetime.date(2026, 3, 18))  # two days of one user, a Tuesday and a Wednesday


def _us(day: datetime.date) -> str:
    return f"{day.month}/{day.day}/{day.year}"


# (name, template: {s} is the stable text around, {w} the caller's words holding the value; those words for a day)
NOW_FORMS: list[tuple[str, Callable[[datetime.date], str]]] = [
    ("a sentence, a weekday and a long date", lambda d: f"The current date is {d:%A}, {d:%B} {d.day}, {d.year}."),
    ("today is, ctime-like", lambda d: f"Today is {d:%a %b} {d.day} {d.year}."),
    ("for context, today's date", lambda d: f"For context, today's date is {d:%a %b} {d.day}, {d.year}."),
    (
        "use the current date of",
        lambda d: f"When you search, use the current date of {d:%B} {d.day}, {d.year} to judge recency.",
    ),
    ("a heading with the date on the next line", lambda d: f"### Current Date\n{_us(d)}"),
    ("a heading, a blank line, the date", lambda d: f"## Today\n\n{d:%A}, {d.day} {d:%B} {d.year}"),
    ("a Date: label, US form", lambda d: f"Date: {_us(d)}"),
    ("a lowercase list item", lambda d: f"- date: {d.isoformat()}"),
    ("a date-time with seconds, PM and a zone", lambda d: f"Current time: {d.isoformat()} 07:05:51 PM PDT-0700"),
    ("a date, European form", lambda d: f"Current date: {d.day}/{d.month:02d}/{d.year}"),
    ("a date with a weekday line beside it", lambda d: f"Date: {_us(d)}\nDay of Week: {d:%A}"),
    ("it is now, day first", lambda d: f"It is now {d.day} {d:%B} {d.year}, so mention the season when it matters."),
    ("as of, an ordinal", lambda d: f"As of {d:%B} {d.day}th, {d.year}, the user is on the free plan."),
    ("an env block's label", lambda d: f"Today's date: {d.isoformat()}"),
    ("bold label, dots", lambda d: f"**Current date:** {d.day:02d}.{d.month:02d}.{d.year}"),
    ("a time of day alone, introduced", lambda d: f"The user's local time is {d.day % 12}:05 PM (PDT)."),
]
AROUND = "You are Iris, a research assistant for a newsroom.\n{w}\nCite every source with a link. Be brief."
IN_A_PARAGRAPH = "You are Iris, a research assistant. {w} Cite every source with a link."


@pytest.mark.parametrize(("name", "words"), NOW_FORMS, ids=[name for name, _ in NOW_FORMS])
@pytest.mark.parametrize("around", [AROUND, IN_A_PARAGRAPH], ids=["own lines", "in a paragraph"])
def test_now_in_any_written_form_moves_on_first_sight_with_the_callers_words_verbatim(
    name: str, words: Callable[[datetime.date], str], around: str
):
    if around is IN_A_PARAGRAPH and ("\n" in words(DAYS[0]) or words(DAYS[0]).startswith("- ")):
        pytest.skip("a heading, a list item or a line beside the date is a line of its own")
    if around is IN_A_PARAGRAPH and not words(DAYS[0]).endswith("."):
        words = functools.partial(lambda form, day: form(day) + ".", words)  # a sentence of its own in a paragraph
    sent = [_sent(around.format(w=words(day))) for day in DAYS]  # each day in a fresh process
    assert sent[0][0] == sent[1][0] == around.replace("\n{w}", "").replace(" {w}", "")  # nothing of the day stays
    for day, (_, [turn]) in zip(DAYS, sent):
        verbatim = words(day).replace("\n\n", "\n")  # the note keeps no blank line
        assert turn["content"] == f"Hello\n\n{NOTE_OPEN}\n{verbatim}\n{NOTE_CLOSE}"  # read back: the caller's words


def test_a_date_whose_value_is_today_moves_with_its_sentence_and_one_days_ago_stays():
    today = datetime.datetime.now(datetime.UTC).date()
    for form in ("%b {d}, %Y", "%Y-%m-%d", "%A, %B {d}, %Y", "{d} %B %Y"):
        written = today.strftime(form.format(d=today.day))
        system = f"You summarise the newsroom's notes.\nNotes from the stand-up ({written}) follow. Be brief."
        sent, [turn] = _sent(system)
        assert sent == "You summarise the newsroom's notes.\nBe brief."
        assert turn["content"] == f"Hello\n\n{NOTE_OPEN}\nNotes from the stand-up ({written}) follow.\n{NOTE_CLOSE}"
        earlier = today - datetime.timedelta(days=3)
        stable = system.replace(written, earlier.strftime(form.format(d=earlier.day)))
        assert _sent(stable) == (stable, [{"role": "user", "content": "Hello"}])
