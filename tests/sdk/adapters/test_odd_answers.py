"""A 200 body that is not the API's full answer (a non-strict client hands it over as it came) reaches
the caller wrapped as it does bare: kvwise's bookkeeping reads what is there and never raises."""

from __future__ import annotations

from typing import Any

import anthropic
import openai
import pytest

import sdk
from tests.sdk.canned_server import canned  # noqa: F401 (the fixture)
from tests.sdk.helpers import resolve

USER = [{"role": "user", "content": "hi"}]
# Every answer field kvwise reads (the answer's list, its end, its usage) absent, null or half there.
BODIES = [
    {"id": "x"},
    {"id": "x", "choices": None, "content": None, "output": None, "usage": None},
    {
        "id": "x",
        "choices": [{"index": 0, "message": None}],
        "content": [{"type": "text"}],
        "output": [{"type": "message", "content": None}],
        "usage": {"prompt_tokens": None, "input_tokens": None},
    },
]
CALLS = {
    "chat": lambda client: client.chat.completions.create(model="gpt-4o", messages=USER),
    "completions": lambda client: client.completions.create(model="gpt-3.5-turbo-instruct", prompt="hi"),
    "responses": lambda client: client.responses.create(model="gpt-4o", input="hi"),
    "messages": lambda client: client.messages.create(model="claude-sonnet-4-6", max_tokens=8, messages=USER),
}


def _client(call: str, url: str, mode: str) -> Any:
    if call == "messages":
        return (anthropic.Anthropic if mode == "sync" else anthropic.AsyncAnthropic)(
            base_url=url, api_key="k", max_retries=0
        )
    return (openai.OpenAI if mode == "sync" else openai.AsyncOpenAI)(base_url=f"{url}/v1", api_key="k", max_retries=0)


@pytest.mark.parametrize("body", BODIES, ids=["absent", "null", "half"])
@pytest.mark.parametrize("call", sorted(CALLS))
async def test_an_answer_without_its_lists_reaches_the_caller_as_it_does_bare(canned, mode, call, body):
    canned.answer(body)
    bare = await resolve(CALLS[call](_client(call, canned.url, mode)))
    # content captured and a client-side stop: every reader of the answer runs
    policy = sdk.Policy(capture_content=True, stop=("never", "seen", "in", "this", "answer"))
    wrapped = await resolve(CALLS[call](sdk.wrap(_client(call, canned.url, mode), policy)))
    assert type(wrapped) is type(bare) and wrapped.model_dump() == bare.model_dump()
