"""A corpus of system prompts as apps write them, with per-request values in mid-line, end-of-line
and own-line positions, and exactly what of each stays in the system prompt and what goes to the note.

Each prompt is a template over the values of one request (`VALUES`, `OTHER_VALUES`): a request id,
dates and times in several forms, a session, a trace id, an epoch, a nonce. `kept` is the system
prompt once the values moved (it holds no value: the same bytes for every request), `note` the
context note's lines (templates too): the caller's words around each value, verbatim (its
sentence, its labelled line with its bullet, its heading), never a label kvwise made up.
"""

from __future__ import annotations

from dataclasses import dataclass

VALUES = {
    "rid": "3f2a8c1e-9b4d-4e7a-8f1c-2d5e6a7b8c9d",
    "date": "2026-12-02",
    "long_date": "December 2, 2026",
    "time": "18:01 UTC",
    "iso": "2026-12-02T18:01:26Z",
    "ctime": "Wed Dec 2 18:01:26 UTC 2026",
    "epoch": "1764698486",
    "ms": "1764698486123",
    "session": "s-20261202-0042",
    "trace": "4bf92f3577b34da6a3ce929d0e0e4736",
    "nonce": "a3f9c2e81b7d4e6f0a9b",
    "weekday": "Wednesday",
    "us_date": "12/2/2026",
    "local": "2026-12-02 07:05:51 PM PDT-0700",
}
OTHER_VALUES = {
    "rid": "9c1d7e2a-4b3f-4a6e-8d2c-1f0e9a8b7c6d",
    "date": "2026-12-03",
    "long_date": "December 3, 2026",
    "time": "09:15 UTC",
    "iso": "2026-12-03T09:15:02Z",
    "ctime": "Thu Dec 3 09:15:02 UTC 2026",
    "epoch": "1764753302",
    "ms": "1764753302456",
    "session": "s-20261203-0007",
    "trace": "0af7651916cd43dd8448eb211c80319c",
    "nonce": "7b2e9d4c1a8f3e6b5d0c",
    "weekday": "Thursday",
    "us_date": "12/3/2026",
    "local": "2026-12-03 08:15:02 AM PDT-0700",
}


@dataclass(frozen=True, slots=True)
class SystemPrompt:
    """A system prompt template, what stays of it, and the note's lines (templates over the values)."""

    name: str
    template: str
    kept: str
    note: tuple[str, ...]
    by_memory: bool = (
        False  # its values move only once calls show they change (`sdk.prompt.first_sight`), not on first sight
    )

    def prompt(self, values: dict[str, str]) -> str:
        return self.template.format(**values)

    def note_lines(self, values: dict[str, str]) -> list[str]:
        return [line.format(**values) for line in self.note]


CORPUS = [
    SystemPrompt(
        "the issue's support bot: a date as a sentence, the rules after it stay",
        "You are a support bot. Current date: {date}. Always reply in French and never mention prices.",
        "You are a support bot. Always reply in French and never mention prices.",
        ("Current date: {date}.",),
    ),
    SystemPrompt(
        "a request id on the first line",
        "Request ID: {rid}\nYou are a helpful assistant.",
        "You are a helpful assistant.",
        ("Request ID: {rid}",),
    ),
    SystemPrompt(
        "a request id on the last line",
        "You are a helpful assistant.\nRequest ID: {rid}",
        "You are a helpful assistant.",
        ("Request ID: {rid}",),
    ),
    SystemPrompt(
        "a request id as a sentence between two",
        "You are Ada. Request ID: {rid}. Answer in English.",
        "You are Ada. Answer in English.",
        ("Request ID: {rid}.",),
    ),
    SystemPrompt(
        "an ISO time at the end of a line",
        "You are a coding agent. Current time: {iso}\nNever push to main.",
        "You are a coding agent.\nNever push to main.",
        ("Current time: {iso}",),
    ),
    SystemPrompt(
        "a long date leading a sentence that goes on: the whole sentence",
        "Today's date: {long_date}, so mention the season when it matters.\nBe brief.",
        "Be brief.",
        ("Today's date: {long_date}, so mention the season when it matters.",),
    ),
    SystemPrompt(
        "a session id as a markdown list item, with its bullet",
        "## Context\n- **Session ID:** {session}\n- **Locale:** pt-PT\n\nHelp the user with their booking.",
        "## Context\n- **Locale:** pt-PT\n\nHelp the user with their booking.",
        ("- **Session ID:** {session}",),
    ),
    SystemPrompt(
        "a log-style trace id before other pairs: the whole log line",
        "trace_id={trace} span=checkout user=alice\nYou summarise logs.",
        "You summarise logs.",
        ("trace_id={trace} span=checkout user=alice",),
    ),
    SystemPrompt(
        "an epoch timestamp on its own line",
        "Timestamp: {epoch}\nYou are the scheduling assistant. Never double-book.",
        "You are the scheduling assistant. Never double-book.",
        ("Timestamp: {epoch}",),
    ),
    SystemPrompt(
        "a time in brackets mid-sentence: the whole sentence",
        "You are the scheduling assistant (Current time: {time}). Book meetings in the user's zone.",
        "Book meetings in the user's zone.",
        ("You are the scheduling assistant (Current time: {time}).",),
    ),
    SystemPrompt(
        "a date introduced as the current one in running text",
        "You are a travel agent. The current date is {date}.",
        "You are a travel agent.",
        ("The current date is {date}.",),
    ),
    SystemPrompt(
        "an unlabelled ISO time in running text: its whole sentence",
        "You are a travel agent. It is now {iso} where the user is.",
        "You are a travel agent.",
        ("It is now {iso} where the user is.",),
    ),
    SystemPrompt(
        "a session opening the prompt",
        "Session: {session}. You help with billing questions only.",
        "You help with billing questions only.",
        ("Session: {session}.",),
    ),
    SystemPrompt(
        "a session closing the prompt",
        "You help with billing questions only. Session: {session}",
        "You help with billing questions only.",
        ("Session: {session}",),
    ),
    SystemPrompt(
        "two ids on their own lines",
        "Correlation-ID: {rid}\nX-Request-Id: {session}\nYou triage incidents.",
        "You triage incidents.",
        ("Correlation-ID: {rid}", "X-Request-Id: {session}"),
    ),
    SystemPrompt(
        "a ctime date between paragraphs",
        "You are a research assistant.\n\nCurrent date and time: {ctime}\n\nCite your sources.",
        "You are a research assistant.\n\n\nCite your sources.",
        ("Current date and time: {ctime}",),
    ),
    SystemPrompt(
        "a nonce the prompt refers to",
        "Nonce: {nonce}\nSign every answer with the nonce above.",
        "Sign every answer with the nonce above.",
        ("Nonce: {nonce}",),
    ),
    SystemPrompt(
        "a date ending its clause with a semicolon: the whole sentence",
        "You are an on-call assistant. Current date: {date}; escalate sev-1 incidents at once.",
        "You are an on-call assistant.",
        ("Current date: {date}; escalate sev-1 incidents at once.",),
    ),
    SystemPrompt(
        "a generation time over a catalogue",
        "Generated at: {iso}\nThe catalogue below lists every product with its price.",
        "The catalogue below lists every product with its price.",
        ("Generated at: {iso}",),
    ),
    SystemPrompt(
        "a request id in a blockquote",
        "> Request ID: {rid}\n\nYou are a friendly concierge.",
        "\nYou are a friendly concierge.",
        ("> Request ID: {rid}",),
    ),
    SystemPrompt(
        "a local time mid-line beside fixed office hours",
        "You answer HR questions. Local time: {time}. Office hours are 09:00 to 17:30.",
        "You answer HR questions. Office hours are 09:00 to 17:30.",
        ("Local time: {time}.",),
    ),
    SystemPrompt(
        "a server time before a table cell: the whole line",
        "Server time: {iso} | region eu-west-1\nYou monitor deployments.",
        "You monitor deployments.",
        ("Server time: {iso} | region eu-west-1",),
    ),
    SystemPrompt(
        "a run id over a pipeline step",
        "Run ID: {session}\nYou are step 3 of the data pipeline: validate the rows.",
        "You are step 3 of the data pipeline: validate the rows.",
        ("Run ID: {session}",),
    ),
    SystemPrompt(
        "two ids as sentences before an instruction",
        "Conversation ID: {rid}. Message ID: {session}. Keep answers under 100 words.",
        "Keep answers under 100 words.",
        ("Conversation ID: {rid}.", "Message ID: {session}."),
    ),
    SystemPrompt(
        "a long date between a role and a fact",
        "You are a bank assistant. Today's date: {long_date}. Rates change on the 1st of each month.",
        "You are a bank assistant. Rates change on the 1st of each month.",
        ("Today's date: {long_date}.",),
    ),
    SystemPrompt(
        "an event id in milliseconds",
        "Event ID: {ms}\nYou classify webhook payloads.",
        "You classify webhook payloads.",
        ("Event ID: {ms}",),
    ),
    SystemPrompt(
        "a plain Date: label names the current date",
        "You are a legal assistant. Date: {date}. Jurisdiction: Portugal. Cite statutes by number.",
        "You are a legal assistant. Jurisdiction: Portugal. Cite statutes by number.",
        ("Date: {date}.",),
    ),
    SystemPrompt(
        "a build hash only calls show changing: its sentence, once it changed",
        "You triage crash reports. Build {nonce} is live; file bugs against it.\nBe terse.",
        "You triage crash reports.\nBe terse.",
        ("Build {nonce} is live; file bugs against it.",),
        by_memory=True,
    ),
    SystemPrompt(
        "two log-style pairs on one line",
        "SYSTEM CONTEXT\nrequest_id={session} session_id={nonce}\nAnswer tersely.",
        "SYSTEM CONTEXT\nAnswer tersely.",
        ("request_id={session} session_id={nonce}",),
    ),
    SystemPrompt(
        "a date line above a price list",
        "You are a shopping assistant.\nCurrent date: {date}\n"
        "Prices below hold until the month ends:\n- Basic: $9\n- Pro: $29",
        "You are a shopping assistant.\nPrices below hold until the month ends:\n- Basic: $9\n- Pro: $29",
        ("Current date: {date}",),
    ),
    SystemPrompt(
        "a date and a time joined by 'at'",
        "You are a meeting scheduler. Current date and time: {long_date} at {time}."
        " Suggest slots within 5 working days.",
        "You are a meeting scheduler. Suggest slots within 5 working days.",
        ("Current date and time: {long_date} at {time}.",),
    ),
    SystemPrompt(
        "an indented trace id in a context block",
        "Context:\n    Trace-Id: {trace}\n    Tenant: northwind\nExplain errors to the user plainly.",
        "Context:\n    Tenant: northwind\nExplain errors to the user plainly.",
        ("Trace-Id: {trace}",),
    ),
    SystemPrompt(
        "a bare request uuid mid-sentence: the whole sentence",
        "You work for Acme. You handle request {rid} for the billing team; never share card numbers.",
        "You work for Acme.",
        ("You handle request {rid} for the billing team; never share card numbers.",),
    ),
    SystemPrompt(
        "a timestamp with milliseconds ending a sentence",
        "Timestamp: {iso}. Use it to judge how recent the user's data is.",
        "Use it to judge how recent the user's data is.",
        ("Timestamp: {iso}.",),
    ),
    SystemPrompt(
        "a sentence date with a weekday, Anthropic's published form",
        "The assistant is Claude, created by Anthropic.\n\n"
        "The current date is {weekday}, {long_date}.\n\nClaude enjoys helping.",
        "The assistant is Claude, created by Anthropic.\n\n\nClaude enjoys helping.",
        ("The current date is {weekday}, {long_date}.",),
    ),
    SystemPrompt(
        "a heading with the date on the next line",
        "You are a coding agent.\n\n### Current Date\n{us_date}\n\n### Rules\nNever push to main.",
        "You are a coding agent.\n\n\n### Rules\nNever push to main.",
        ("### Current Date", "{us_date}"),
    ),
    SystemPrompt(
        "a date label with a weekday line beside it",
        "Date: {us_date}\nDay of Week: {weekday}\nYou plan the user's week.",
        "You plan the user's week.",
        ("Date: {us_date}", "Day of Week: {weekday}"),
    ),
    SystemPrompt(
        "a date-time with seconds, PM and an offset",
        "You are a support agent.\nCurrent time: {local}\nBe kind.",
        "You are a support agent.\nBe kind.",
        ("Current time: {local}",),
    ),
]
