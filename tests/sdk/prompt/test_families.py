"""Volatile means "changes between calls": the per-client family memory and what moves because of it."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest

import sdk
from sdk.adapters import adapter_for
from sdk.call import Api, Call, Provider
from sdk.pipeline import Pipeline
from sdk.prompt.canonical import NOTE_CLOSE, NOTE_OPEN
from sdk.prompt.families import FamilyMemory, family_key
from tests.sdk.helpers import LONG_SYSTEM, resolve

PROJECT = "5b0e7c1a-3d4f-4a8e-9c2b-7f1d6e5a4b3c"
EXAMPLE = "2026-01-01T09:00:00Z"
BUILD, OTHER_BUILD = "4bf92f3577b34da6a3ce929d0e0e4736", "0af7651916cd43dd8448eb211c80319c"
KEY = family_key(["Request ID: <Request ID>\nFile tickets in project <uuid>."])


@pytest.mark.parametrize(
    ("calls", "expected"),
    [
        ([("a", "p")], [(False, False)]),  # the first call: nothing known, nothing moves
        ([("a", "p"), ("b", "p")], [(False, False), (True, False)]),
        ([("a", "p"), ("b", "p"), ("c", "p")], [(False, False), (True, False), (True, False)]),
        ([("a", "p"), ("a", "p"), ("a", "q")], [(False, False), (False, False), (False, True)]),
        (
            [("a", "p"), ("a", "q"), ("a", "p"), ("a", "p")],
            [(False, False), (False, True), (False, True), (False, True)],
        ),
        ([("a", "p"), ("a", "p", "x")], [(False, False), (False, False, False)]),  # another shape starts over
    ],
)
def test_a_candidate_changes_once_it_differed_between_two_calls_and_from_then_on_for_good(calls, expected):
    memory = FamilyMemory()
    assert [memory.observe(KEY, tuple(map(hash, values)), b"").changed for values in calls] == expected


def test_the_memory_forgets_the_least_recently_used_family_beyond_its_size():
    memory = FamilyMemory(size=2)
    first, second, third = (family_key([name]) for name in ("first", "second", "third"))
    memory.observe(first, (1,), b"")
    memory.observe(second, (1,), b"")
    memory.observe(first, (1,), b"")  # used again: now the second is the oldest
    memory.observe(third, (1,), b"")
    assert len(memory) == 2
    assert memory.observe(first, (2,), b"").changed == (True,)  # remembered: its bytes changed
    assert memory.observe(second, (2,), b"").changed == (False,)  # forgotten: a first call again


def test_concurrent_calls_of_one_family_see_exactly_one_first_call_and_no_change():
    memory = FamilyMemory()
    results: list[Any] = []
    lock = threading.Lock()

    def worker() -> None:
        for _ in range(200):
            outcome = memory.observe(KEY, (hash("same"), hash("bytes")), b"").changed
            with lock:
                results.append(outcome)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 8 * 200 and set(results) == {(False, False)}
    assert len(memory) == 1


def test_a_memory_of_no_size_is_refused_naming_the_size():
    with pytest.raises(ValueError, match="size"):
        FamilyMemory(size=0)


def _chat(
    pipeline: Pipeline, system: str, *, tools: list | None = None, turns: list | None = None, api: Api = Api.CHAT
) -> Call:
    kwargs: dict[str, Any] = {"model": "m", "tools": tools or []}
    user = turns or [{"role": "user", "content": "Hello"}]
    if api is Api.RESPONSES:
        kwargs.update(instructions=system, input=user)
    else:
        kwargs["messages"] = [{"role": "system", "content": system}, *user]
    call = adapter_for(api).to_call(kwargs, Provider.OPENAI)
    pipeline.prepare(call)
    return call


def _volatile(call: Call) -> list[str]:
    """The changes the volatile step recorded (the pipeline's other steps record theirs too)."""
    return sorted(change for change in call.decided.changes if change.startswith("volatile"))


def _system_text(call: Call) -> str:
    return json.dumps(call.system)


def _request(project: str = PROJECT) -> str:
    return f"Request ID: {uuid.uuid4()}\nYou are the support assistant. File tickets in project {project}."


def _build(build: str = BUILD) -> str:
    """A prompt whose only candidate is one calls alone can tell (a hex run: a commit, a key id, or a nonce)."""
    return f"You are the release assistant. Answer for build {build} only."


def test_a_request_id_moves_on_first_sight_in_every_fresh_client_and_the_rest_of_the_prompt_stays():
    systems = [_request() for _ in range(4)]
    calls = [_chat(Pipeline(sdk.Policy()), system) for system in systems]  # one call per client: a process each
    for call, system in zip(calls, systems):
        assert "Request ID" not in _system_text(call) and PROJECT not in _system_text(call)  # both by shape
        assert _volatile(call) == ["volatile_moved:labelled_value", "volatile_moved:uuid"]
        note = "\n".join([NOTE_OPEN, system.splitlines()[0], f"File tickets in project {PROJECT}.", NOTE_CLOSE])
        assert call.messages == [
            {"role": "user", "content": f"Hello\n\n{note}"}
        ]  # the caller's text, the note after it
    assert len({_system_text(call) for call in calls}) == 1  # the same bytes in every process: cacheable
    assert calls[0].system == [
        {"role": "system", "content": "You are the support assistant."}
    ]  # values go with their sentences


def test_a_candidate_only_calls_can_tell_stays_while_the_same_then_moves_for_good_never_flipping():
    pipeline = Pipeline(sdk.Policy())
    builds = [BUILD, BUILD, BUILD, OTHER_BUILD, OTHER_BUILD, BUILD]
    calls = [_chat(pipeline, _build(build)) for build in builds]
    assert {_system_text(call) for call in calls[:3]} == {
        json.dumps([{"role": "system", "content": _build()}])
    }  # as sent
    assert all(call.messages == [{"role": "user", "content": "Hello"}] for call in calls[:3])  # no note
    kept = "You are the release assistant."
    assert {_system_text(call) for call in calls[3:]} == {json.dumps([{"role": "system", "content": kept}])}
    for call, build in zip(calls[3:], builds[3:]):  # moved once, moved for good, with its sentence, verbatim
        note = f"{NOTE_OPEN}\nAnswer for build {build} only.\n{NOTE_CLOSE}"
        assert call.messages == [{"role": "user", "content": f"Hello\n\n{note}"}]


def test_families_are_told_apart_by_their_stable_text_and_remembered_per_wrapped_client():
    pipeline = Pipeline(sdk.Policy())
    _chat(pipeline, _build())
    assert OTHER_BUILD not in _system_text(_chat(pipeline, _build(OTHER_BUILD)))  # the family saw it change
    assert OTHER_BUILD in _system_text(
        _chat(pipeline, _build(OTHER_BUILD).replace("release", "billing"))
    )  # a new family
    assert OTHER_BUILD in _system_text(_chat(Pipeline(sdk.Policy()), _build(OTHER_BUILD)))  # another client


def test_tool_definitions_are_never_rewritten_and_an_example_that_changes_is_reported():
    def tools(example: str) -> list:
        schema = {
            "type": "object",
            "properties": {"start": {"type": "string", "description": f"ISO 8601 start, e.g. {example}"}},
        }
        return [
            {"type": "function", "function": {"name": "book", "description": "Book a meeting.", "parameters": schema}}
        ]

    pipeline = Pipeline(sdk.Policy())
    for example in (EXAMPLE, EXAMPLE, EXAMPLE):
        call = _chat(pipeline, "Be brief.", tools=tools(example))
        assert call.tools == tools(example) and not _volatile(call)
    changed = _chat(pipeline, "Be brief.", tools=tools("2026-01-02T10:30:00Z"))
    assert changed.tools == tools("2026-01-02T10:30:00Z")
    assert _volatile(changed) == ["volatile_found:timestamp"]


def test_warn_mode_reports_what_would_move_and_moves_nothing():
    pipeline = Pipeline(sdk.Policy(volatile="warn"))
    first = _chat(pipeline, _request())
    assert _volatile(first) == ["volatile_found:labelled_value", "volatile_found:uuid"]  # by shape: on the first call
    assert "Request ID" in _system_text(first) and first.messages[-1]["content"] == "Hello"
    assert _volatile(_chat(pipeline, _build())) == []  # only calls can tell: nothing has changed yet


CHAT_LOOP = [
    {"role": "user", "content": "Book a meeting with Ana."},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "book", "arguments": "{}"}}],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "booked"},
]
RESPONSES_LOOP = [
    {"role": "user", "content": "Book a meeting with Ana."},
    {"type": "function_call", "call_id": "c1", "name": "book", "arguments": "{}"},
    {"type": "function_call_output", "call_id": "c1", "output": "booked"},
]


@pytest.mark.parametrize(
    ("api", "loop"), [(Api.CHAT, CHAT_LOOP), (Api.RESPONSES, RESPONSES_LOOP)], ids=["chat", "responses"]
)
def test_in_a_tool_loop_the_note_ends_the_first_user_turn_so_each_call_begins_with_the_whole_previous_one(api, loop):
    pipeline = Pipeline(sdk.Policy())
    system = (
        f"Request ID: {uuid.uuid4()}\nYou are the support assistant."  # moved on sight, constant over the run's calls
    )
    first, second = (
        _chat(pipeline, system, turns=[dict(turn) for turn in turns], api=api) for turns in (loop[:1], loop)
    )
    note = f"{NOTE_OPEN}\n{system.splitlines()[0]}\n{NOTE_CLOSE}"
    assert first.messages == [{"role": "user", "content": f"{loop[0]['content']}\n\n{note}"}]  # no turn added
    assert second.messages == first.messages + loop[1:]  # the loop's turns as the caller wrote them
    assert second.system == first.system


async def test_through_a_wrapped_client_a_stable_build_hash_reaches_the_server_in_place_and_the_request_id_moves_from_the_first_call(  # noqa: E501 (the name states the claim it tests)
    simulator, openai_client
):
    wrapped = sdk.wrap(openai_client)
    systems = []
    for _ in range(3):
        system = f"Request ID: {uuid.uuid4()}\n{_build()}\n{LONG_SYSTEM}"
        await resolve(
            wrapped.chat.completions.create(
                model="gpt-5.4", messages=[{"role": "system", "content": system}, {"role": "user", "content": "Hi"}]
            )
        )
        systems.append(system)
    sent = [request.body["messages"][0]["content"] for request in simulator.requests]
    assert sent == [f"{_build()}\n{LONG_SYSTEM}"] * 3
    for system, request in zip(systems, simulator.requests):
        assert system.splitlines()[0] in request.body["messages"][-1]["content"]  # the request id: moved, not dropped


ANTHROPIC_LOOP = [
    {"role": "user", "content": "Book a meeting with Ana."},
    {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "book", "input": {}}]},
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "booked"}]},
]
LOOPS = {Api.CHAT: CHAT_LOOP, Api.RESPONSES: RESPONSES_LOOP, Api.MESSAGES: ANTHROPIC_LOOP}


def _call(pipeline: Pipeline, api: Api, system: str, turns: list[Any]) -> Call:
    """A call of `api` through the pipeline: `system` as its system prompt or instructions, then `turns`."""
    if api is not Api.MESSAGES:
        return _chat(pipeline, system, turns=turns, api=api)
    call = adapter_for(api).to_call(
        {"model": "claude-sonnet-5", "max_tokens": 10, "system": system, "messages": turns}, Provider.ANTHROPIC
    )
    pipeline.prepare(call)
    return call


def _note(*lines: str) -> str:
    return "\n".join([NOTE_OPEN, *lines, NOTE_CLOSE])


@pytest.mark.parametrize("api", list(LOOPS), ids=["chat", "responses", "anthropic"])
def test_a_value_constant_within_conversations_goes_to_the_first_turns_note_one_changing_within_one_to_the_tail_note_for_good(  # noqa: E501 (the name states the claim it tests)
    api,
):
    pipeline = Pipeline(sdk.Policy())
    loop = LOOPS[api]
    run_id, next_id = uuid.uuid4(), uuid.uuid4()
    stamps = ["2026-12-01T09:00:00+00:00", "2026-12-01T09:00:07+00:00", "2026-12-01T09:01:00+00:00"]

    def system(request_id: uuid.UUID, stamp: str) -> str:
        return f"Request ID: {request_id}\nCurrent time: {stamp}\nYou are the booking assistant."

    other_request = {"role": "user", "content": "Book a meeting with Bo."}
    opening = _call(
        pipeline, api, system(run_id, stamps[0]), [dict(other_request)]
    )  # by shape: both to the first turn's note
    both = _note(f"Request ID: {run_id}", f"Current time: {stamps[0]}")
    assert json.dumps(opening.system).count("booking assistant") == 1 and "Request ID" not in json.dumps(opening.system)
    content = opening.messages[0]["content"]
    assert both in (content if isinstance(content, str) else [block["text"] for block in content])
    grown = _call(
        pipeline, api, system(run_id, stamps[1]), [dict(other_request), *loop[1:]]
    )  # the time changed within the run
    assert "Current time" not in json.dumps(grown.system) and "Request ID" not in json.dumps(grown.system)
    # A new run: its id to the first turn's note; the time to the tail note, for good: the run's two calls carry
    # the same time, and it stays at the tail.
    first, second = (
        _call(pipeline, api, system(next_id, stamps[2]), [dict(turn) for turn in turns]) for turns in (loop[:1], loop)
    )
    conversation, tail = _note(f"Request ID: {next_id}"), _note(f"Current time: {stamps[2]}")
    assert "Request ID" not in json.dumps(second.system) and "Current time" not in json.dumps(second.system)
    if api is Api.MESSAGES:  # blocks of their own: the conversation's note, then the tail note
        assert first.messages == [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": loop[0]["content"]},
                    {"type": "text", "text": conversation},
                    {"type": "text", "text": tail},
                ],
            }
        ]
        assert second.messages[:2] == [{"role": "user", "content": first.messages[0]["content"][:2]}, loop[1]]
        assert second.messages[2] == {"role": "user", "content": [*loop[2]["content"], {"type": "text", "text": tail}]}
    else:  # after the text, each after a blank line; after the tool's output a user turn of its own
        assert first.messages == [{"role": "user", "content": f"{loop[0]['content']}\n\n{conversation}\n\n{tail}"}]
        assert second.messages == [
            {"role": "user", "content": f"{loop[0]['content']}\n\n{conversation}"},
            *loop[1:],
            {"role": "user", "content": tail},
        ]


RULES = "\n".join(f"{n}. Rule {n}: keep the answer to what the user asked about topic {n}." for n in range(1, 9))


def _agent(request: str, lines: list[str]) -> str:
    """A coding agent's prompt: a request id kvwise recognises beside run-time lines it cannot know."""
    return "\n".join(["You are a coding agent.", f"Request ID: {request}", *lines, RULES, "Never push to main."])


@pytest.mark.parametrize(
    "changing",
    [
        ["Day of Week: {n}day"],  # a weekday line with no date beside it
        ["Working directory: /tmp/agent-177374053351{n}-k3f9q{n}"],  # a per-run temp directory
        ["The dev server listens on http://localhost:5{n}73."],  # a port
        ["You are talking to user{n}@example.com."],  # one process serving many users
        ["Session counter: {n}"],  # a counter
    ],
    ids=["weekday", "temp path", "port", "user", "counter"],
)
def test_an_unrecognised_changing_line_beside_a_recognised_one_moves_whole_from_the_second_call_in_one_process(
    changing: list[str],
):
    pipeline = Pipeline(sdk.Policy())
    calls = [_chat(pipeline, _agent(str(uuid.uuid4()), [line.format(n=n) for line in changing])) for n in range(4)]
    systems = [call.system[0]["content"] for call in calls]
    assert all(line.format(n=0) in systems[0] for line in changing)  # the first call: nothing known, it stays
    stable = "\n".join(["You are a coding agent.", RULES, "Never push to main."])
    assert systems[1:] == [stable] * 3  # learnt on the second call, moved for good: the same bytes from then on
    for n, call in enumerate(calls[1:], 1):  # the caller's lines, whole and verbatim, in the note
        note = "\n".join(
            [NOTE_OPEN, f"Request ID: {_agent_id(calls[n])}", *(line.format(n=n) for line in changing), NOTE_CLOSE]
        )
        assert call.messages == [{"role": "user", "content": f"Hello\n\n{note}"}]
        assert "volatile_moved:line" in _volatile(call)


def _agent_id(call: Call) -> str:
    note = call.messages[0]["content"]
    return note.split("Request ID: ", 1)[1].split("\n", 1)[0]


def test_a_git_status_block_whose_length_changes_moves_its_changed_lines_whole_and_the_rest_stays():
    pipeline = Pipeline(sdk.Policy())
    statuses = [["M src/app.py"], ["M src/app.py", "?? notes.txt"], ["M src/db.py", "A src/cache.py", "D old.py"]]
    calls = [
        _chat(pipeline, _agent(str(uuid.uuid4()), ["<git-status>", *status, "</git-status>"])) for status in statuses
    ]
    assert "M src/app.py" in calls[0].system[0]["content"]  # the first call: as written
    assert "?? notes.txt" not in calls[1].system[0]["content"]  # the inserted line moved
    third = calls[2].system[0]["content"]
    assert not any(line in third for line in statuses[2]) and "<git-status>\n</git-status>" in third
    assert calls[2].messages[0]["content"].endswith("\n".join([*statuses[2], NOTE_CLOSE]))


def test_two_prompts_that_share_a_first_line_teach_each_other_nothing():
    pipeline = Pipeline(
        sdk.Policy()
    )  # (two that share their first and last lines are one family, a middle line changing)
    billing = "You are a helpful assistant.\nRequest ID: {}\nAnswer questions about billing.\nNever share card numbers."
    summary = "You are a helpful assistant.\nRequest ID: {}\nSummarise the document.\nKeep it under 100 words."
    for template in (billing, summary, billing, summary, billing):  # interleaved, as one app's two agents send them
        call = _chat(pipeline, template.format(uuid.uuid4()))
        assert call.system[0]["content"] == template.replace("Request ID: {}\n", "")  # only the request id moved


def test_the_line_memory_keeps_hashes_of_lines_and_flags_only():
    memory = FamilyMemory()
    masked = ["You are a coding agent.\nRequest ID: <Request ID>\nUser: alice\nBe kind.", "Never push to main."]
    memory.observe_lines(masked, [], b"")
    seen = memory.observe_lines([masked[0].replace("alice", "bob"), masked[1]], [], b"")
    lines, key = seen.moving, seen.key
    assert lines == [{2: False}, {}]  # the user's line changed; not within one conversation
    assert key == family_key(["You are a coding agent.\nRequest ID: <Request ID>\nBe kind.", "Never push to main."])
    records = list(memory._store._records.values())  # type: ignore[attr-defined]
    assert all(isinstance(value, int) for record in records for value in record.values)  # no prompt text


def test_a_line_learnt_in_one_run_moves_from_the_next_run_of_another_process_through_the_default_store(simulator):
    root = Path(__file__).resolve().parents[3]
    lines = [f"Working directory: /tmp/agent-177374053351{n}-k3f9q{n}" for n in range(3)]
    for line in lines:  # one call per process, as a CLI agent started once per task; the cache directory is shared
        spec = {
            "package": "openai",
            "base_url": simulator.openai_base_url,
            "model": "gpt-5.4",
            "wrap": True,
            "system": _agent(str(uuid.uuid4()), [line]),
            "user": "Hello",
        }
        out = subprocess.run(
            [sys.executable, "-m", "tests.sdk.prompt.one_call", json.dumps(spec)],
            cwd=root,
            capture_output=True,
            text=True,
        )
        assert out.returncode == 0, out.stderr[-2000:]
    first, *later = [request.body["messages"] for request in simulator.requests]
    assert lines[0] in first[0]["content"]  # the first run: nothing known yet
    for line, messages in zip(lines[1:], later):  # the second run learnt it from the first's record, and the third
        assert messages[0]["content"] == "\n".join(["You are a coding agent.", RULES, "Never push to main."])
        assert messages[1]["content"].endswith(f"\n{line}\n{NOTE_CLOSE}")
