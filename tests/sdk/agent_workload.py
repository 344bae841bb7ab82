"""A realistic agent workload: three prompt families, tool loops with growing history.

Each family's system prompt carries bytes that *look* volatile but never change (a project key, a
workspace key and a commit hash, hex runs whose shape does not say "this request"; a deploy date; a
schema's example date) and bytes that change on every call (a
request id, the current time, a sandbox nonce, an epoch timestamp), where apps usually put them:
at the top, in the middle, at the end. Tasks of the three families interleave, as an app's traffic
does, and each task is a tool loop: the user's request, then one call per tool result until the
answer, each call repeating the whole history so far.

`Call.caller` is the call as the app writes it; `Call.ideal` is what a perfect client-side ordering
would send: the stable bytes in place from the first call, and only the changing ones, in a context
note after everything else (the best any ordering can do: every byte before it is shared with the
next call of the task that can share it).
"""

from __future__ import annotations

import datetime
import json
import random
import uuid
from dataclasses import dataclass
from typing import Any

from sdk.prompt.canonical import NOTE_CLOSE, NOTE_OPEN

PROJECT = "5b0e7c1a3d4f4a8e9c2b7f1d6e5a4b3c"
WORKSPACE = "a1c9e2f47b3d4e6a8f0c2d4b6a8c0e1f"
COMMIT = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b"
DEPLOYED = "2025-11-03"
EXAMPLE_START = "2026-01-01T09:00:00Z"
_SANDBOX = "You run in sandbox {nonce} and must not reach the network."
STABLE = {"support": (PROJECT,), "scheduler": (WORKSPACE, EXAMPLE_START), "coder": (COMMIT, DEPLOYED)}
"""The bytes of each family that look volatile but are the same on every call."""

_TOPICS = (
    "billing",
    "invoices",
    "refunds",
    "single sign-on",
    "API keys",
    "rate limits",
    "webhooks",
    "exports",
    "data retention",
    "audit logs",
    "seat management",
    "the mobile app",
    "the status page",
    "outages",
)


def _rules(family: str, count: int) -> str:
    """`count` numbered rules of a plausible operating manual."""
    rng = random.Random(family)
    verbs = ("Explain", "Check", "Confirm", "Summarise", "Escalate", "Document", "Verify", "Describe")
    rules = []
    for number in range(1, count + 1):
        topic, other = rng.sample(_TOPICS, 2)
        rules.append(
            f"{number}. {rng.choice(verbs)} questions about {topic} with the current policy, cite the help "
            f"article you used, and mention how {topic} relates to {other} only when the user asks."
        )
    return "\n".join(rules)


def _function(name: str, description: str, properties: dict[str, Any]) -> dict[str, Any]:
    schema = {"type": "object", "properties": properties, "required": sorted(properties)}
    return {"type": "function", "function": {"name": name, "description": description, "parameters": schema}}


TOOLS = {
    "support": [
        _function(
            "create_ticket",
            "Open a ticket in the tracker for the user's issue.",
            {"title": {"type": "string"}, "body": {"type": "string"}},
        ),
        _function(
            "search_articles", "Search the help centre and return the best articles.", {"query": {"type": "string"}}
        ),
    ],
    "scheduler": [
        _function(
            "book_meeting",
            "Book a meeting on the shared calendar.",
            {
                "start": {"type": "string", "description": f"ISO 8601 start, e.g. {EXAMPLE_START}"},
                "minutes": {"type": "integer", "description": "Length in minutes, 15 to 240."},
            },
        ),
        _function(
            "find_slots",
            "List free slots of the given people.",
            {"people": {"type": "array", "items": {"type": "string"}}},
        ),
    ],
    "coder": [
        _function("read_file", "Read a file of the repository.", {"path": {"type": "string"}}),
        _function("run_tests", "Run the test suite, or the tests matching a pattern.", {"pattern": {"type": "string"}}),
    ],
}


def _system(family: str, changing: dict[str, str]) -> str:
    """The family's system prompt as the app writes it, with this call's changing values."""
    if family == "support":
        return (
            f"Request ID: {changing['Request ID']}\nCurrent time: {changing['Current time']}\n"
            f"You are Ada, the support assistant of Northwind. File tickets in project {PROJECT}.\n"
            + _rules(family, 40)
        )
    if family == "scheduler":
        return (
            f"You are the scheduling assistant of workspace {WORKSPACE}. Never double-book anyone.\n"
            + _rules(family, 36)
            + f"\nTimestamp: {changing['Timestamp']}"
        )
    return (
        f"You are a coding agent working on the repository at commit {COMMIT} (deployed {DEPLOYED}).\n"
        + _rules(family, 24)
        + f"\n{_SANDBOX.format(nonce=changing['nonce'])}\n"
        + _rules(family + " style", 14)
    )


def _changing(family: str, rng: random.Random, now: datetime.datetime) -> dict[str, str]:
    if family == "support":
        return {"Request ID": str(uuid.UUID(int=rng.getrandbits(128), version=4)), "Current time": now.isoformat()}
    if family == "scheduler":
        return {"Timestamp": str(int(now.timestamp()))}
    return {"nonce": f"{rng.getrandbits(128):032x}"}


def _stable_system(family: str) -> str:
    """The system prompt with the changing bytes taken out (what a perfect ordering keeps in place)."""
    text = _system(family, {"Request ID": "\0", "Current time": "\0", "Timestamp": "\0", "nonce": "\0"})
    for line in ("Request ID: \0\n", "Current time: \0\n", "\nTimestamp: \0", f"\n{_SANDBOX.format(nonce=chr(0))}"):
        text = text.replace(line, "")
    return text


def _moved_words(changing: dict[str, str]) -> list[str]:
    """The caller's words that carry the changing values, verbatim: a labelled line, or the sentence holding a nonce."""
    return [_SANDBOX.format(nonce=value) if key == "nonce" else f"{key}: {value}" for key, value in changing.items()]


@dataclass(frozen=True, slots=True)
class WorkloadCall:
    """One call of the workload: its family, the app's messages, and the ideally ordered ones."""

    family: str
    caller: list[dict[str, Any]]
    ideal: list[dict[str, Any]]

    @property
    def tools(self) -> list[dict[str, Any]]:
        return TOOLS[self.family]


def _tool_step(family: str, task: int, step: int, rng: random.Random) -> list[dict[str, Any]]:
    """The assistant's tool call and the tool's result (a few hundred tokens of realistic output)."""
    name = TOOLS[family][step % 2]["function"]["name"]
    call_id = f"call_{family}_{task}_{step}"
    arguments = json.dumps({"query": f"{rng.choice(_TOPICS)} for account {rng.randint(1000, 9999)}"})
    lines = [
        f"- {rng.choice(_TOPICS)}: {rng.randint(1, 500)} matching records, last updated {rng.randint(1, 28)} days ago"
        for _ in range(rng.randint(20, 45))
    ]
    return [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}],
        },
        {"role": "tool", "tool_call_id": call_id, "content": "\n".join(lines)},
    ]


def workload(tasks_per_family: int = 8, seed: int = 0) -> list[WorkloadCall]:
    """The calls of the workload, in the order an app would send them (families interleaved)."""
    rng = random.Random(seed)
    now = datetime.datetime(2026, 12, 1, 9, 0, tzinfo=datetime.UTC)
    loops: list[tuple[str, str, list[list[dict[str, Any]]]]] = []
    for task in range(tasks_per_family):
        for family in TOOLS:
            request = (
                f"Task {task}: please look into {rng.choice(_TOPICS)}"
                f" for account {rng.randint(1000, 9999)} and report back."
            )
            loops.append((family, request, [_tool_step(family, task, step, rng) for step in range(rng.randint(2, 4))]))
    calls: list[WorkloadCall] = []
    for family, request, steps in loops:
        history: list[dict[str, Any]] = [{"role": "user", "content": request}]
        for step in range(len(steps) + 1):
            now += datetime.timedelta(seconds=rng.randint(1, 30))
            changing = _changing(family, rng, now)
            note = "\n".join([NOTE_OPEN, *_moved_words(changing), NOTE_CLOSE])
            calls.append(
                WorkloadCall(
                    family,
                    caller=[{"role": "system", "content": _system(family, changing)}, *history],
                    ideal=[
                        {"role": "system", "content": _stable_system(family)},
                        *history,
                        {"role": "user", "content": note},
                    ],
                )
            )
            if step < len(steps):
                history = [*history, *steps[step]]
    return calls
