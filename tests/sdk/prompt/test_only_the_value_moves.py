"""The caller's words move whole: a value goes to the note with its sentence, its labelled line or its
heading, verbatim, and every other sentence of the prompt stays where it was.

Table-driven over a corpus of system prompts (`tests.sdk.prompt.system_prompts`): for each, exactly what
stays in the system prompt and what goes to the note, cut alone, through the pipeline a wrapped
client runs, and through a real client against the simulator.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

import sdk
from sdk.adapters import adapter_for
from sdk.call import Api, Provider
from sdk.pipeline import Pipeline
from sdk.prompt.canonical import NOTE_CLOSE, NOTE_OPEN
from sdk.prompt.volatile import cut_volatile, note_lines
from tests.sdk.helpers import resolve
from tests.sdk.prompt.system_prompts import CORPUS, OTHER_VALUES, VALUES, SystemPrompt

IDS = [entry.name for entry in CORPUS]


def test_the_corpus_holds_thirty_prompts_with_values_in_mid_line_end_of_line_and_own_line_positions():
    assert len(CORPUS) >= 30
    lines = [line for entry in CORPUS for line in entry.template.splitlines() if "{" in line]
    own = [
        line
        for line in lines
        if line.lstrip("-*> ").startswith(("Request", "Timestamp", "Nonce", "Run", "Event", "Correlation"))
    ]
    mid = [line for line in lines if not line.rstrip(".").endswith("}") and line not in own]
    end = [line for line in lines if line.rstrip(".").endswith("}") and line not in own]
    assert min(len(own), len(mid), len(end)) >= 5, (len(own), len(mid), len(end))


@pytest.mark.parametrize("entry", CORPUS, ids=IDS)
def test_cutting_a_system_prompt_leaves_all_but_the_values_words_and_the_note_reads_them_verbatim(entry: SystemPrompt):
    prompt = entry.prompt(VALUES)
    kept, removed = cut_volatile(prompt)
    assert kept == entry.kept.format(**VALUES)
    assert [line for match in removed for line in note_lines(match)] == entry.note_lines(VALUES)
    for match in removed:  # read back against the original: the caller's words, whole, never a label made up
        assert prompt[match.start : match.end] == match.text
        assert all(line in _sentences(prompt) for line in note_lines(match)), note_lines(match)


def _sentences(text: str) -> list[str]:
    """Each line of `text` and each sentence of it, without indentation."""
    lines = [line.strip() for line in text.split("\n")]
    return lines + [sentence for line in lines for sentence in re.split(r"(?<=[.!?]) ", line)]


def _sent(pipeline: Pipeline, system: str) -> tuple[str, list[Any]]:
    adapter = adapter_for(Api.CHAT)
    messages = [{"role": "system", "content": system}, {"role": "user", "content": "Hello"}]
    call = adapter.to_call({"model": "m", "messages": messages}, Provider.OPENAI)
    pipeline.prepare(call)
    out = adapter.to_kwargs(call)
    return out["messages"][0]["content"], out["messages"][1:]


@pytest.mark.parametrize("entry", CORPUS, ids=IDS)
def test_through_the_chain_the_values_move_on_first_sight_or_once_they_change_and_the_rest_of_each_prompt_stays(
    entry: SystemPrompt,
):
    pipeline = Pipeline(sdk.Policy())
    if entry.by_memory:  # only calls can tell: the first goes as written, the values move once they changed
        assert _sent(pipeline, entry.prompt(VALUES)) == (entry.prompt(VALUES), [{"role": "user", "content": "Hello"}])
    for values in (OTHER_VALUES, VALUES) if entry.by_memory else (VALUES, OTHER_VALUES, VALUES):  # moved for good
        system, turns = _sent(pipeline, entry.prompt(values))
        assert system == entry.kept.format(**values)
        note = "\n\n" + "\n".join([NOTE_OPEN, *entry.note_lines(values), NOTE_CLOSE]) if entry.note else ""
        assert turns == [{"role": "user", "content": f"Hello{note}"}]  # the note ends the caller's turn, none is added


async def test_the_issues_support_bot_keeps_its_rules_in_the_system_prompt_through_a_real_client(
    simulator, anthropic_client
):
    [entry] = [entry for entry in CORPUS if entry.name.startswith("the issue's")]
    wrapped = sdk.wrap(anthropic_client)
    for values in (VALUES, OTHER_VALUES):
        await resolve(
            wrapped.messages.create(
                model="claude-sonnet-4-6",
                max_tokens=64,
                system=entry.prompt(values),
                messages=[{"role": "user", "content": "Bonjour"}],
            )
        )
    body = simulator.requests[-1].body
    assert body["system"] == entry.kept  # "Always reply in French and never mention prices.": in place
    assert body["messages"] == [
        {
            "role": "user",
            "content": [  # the note: a block of its own after the caller's text, no turn added
                {"type": "text", "text": "Bonjour"},
                {"type": "text", "text": f"{NOTE_OPEN}\nCurrent date: {OTHER_VALUES['date']}.\n{NOTE_CLOSE}"},
            ],
        }
    ]
