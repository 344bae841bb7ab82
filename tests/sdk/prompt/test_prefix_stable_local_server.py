"""Prefix-stable rewriting against the local server's real prefix cache: a Chat tool loop through
`sdk.wrap` reads at least the bare client's cached tokens.

The script of `test_prefix_stable` (instructions starting `Request ID: <uuid4>`, constant within a
run, one function tool, a long user message, the history re-sent with each tool result), sent by a
real `openai` client to the bundled model behind the real server: the engine's block cache decides
what is read (`cached_tokens`, whole 16-token blocks). On every run (the id moved on first sight
to the note that ends the first user turn), each call from the second on reads at least what the
bare one reads, and from the second run on a run's first call reads the instructions and the user
message the previous run's first call wrote, where the bare client, its id in front, reads less.
`tool_choice="required"` makes every call a tool call, as the model is too small to be relied on
for that (and the server renders the tools differently under another choice, so the loop keeps one).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import openai
import pytest

import sdk
from tests.local_backend.serving import served_engine
from tests.sdk.prompt.test_prefix_stable import CHAT_TOOLS, INSTRUCTIONS

CALLS = 3
USER = "Plan my week. " + " ".join(
    f"Day {day % 7 + 1}, stop {day}: the traveller visits a city, checks the forecast, and packs for it."
    for day in range(20)
)


@pytest.fixture(scope="module")
def base_url() -> Iterator[str]:
    with served_engine("default") as served:
        yield f"{served.url}/v1"


def _run(client: Any, request_id: str) -> list[int]:
    """One agent run: the cached tokens of each of its calls."""
    messages: list[Any] = [
        {"role": "system", "content": f"Request ID: {request_id}\n{INSTRUCTIONS}"},
        {"role": "user", "content": USER},
    ]
    cached = []
    for step in range(CALLS):
        response = client.chat.completions.create(
            model="tiny", messages=messages, tools=CHAT_TOOLS, tool_choice="required", max_tokens=24
        )
        cached.append(response.usage.prompt_tokens_details.cached_tokens or 0)
        message = response.choices[0].message
        for call in message.tool_calls or ():
            messages = [
                *messages,
                message.model_dump(exclude_none=True),
                {"role": "tool", "tool_call_id": call.id, "content": f"sunny, day {step}"},
            ]
    return cached


def test_a_chat_tool_loop_through_a_wrapped_client_reads_at_least_the_bare_clients_cached_tokens_on_the_local_server(
    base_url,
):
    with openai.OpenAI(base_url=base_url, api_key="x", max_retries=0) as client:
        bare = [_run(client, str(uuid.uuid4())) for _ in range(3)]  # ids of their own: no run reads another's
        wrapped_client = sdk.wrap(client)
        wrapped = [_run(wrapped_client, str(uuid.uuid4())) for _ in range(3)]  # the id moved on first sight, every run
    assert all(cached > 0 for run in bare for cached in run[1:])  # the bare loop reads its own history back
    for ours, theirs in zip(wrapped, bare):  # every run, calls 2..n
        assert all(mine >= its for mine, its in zip(ours[1:], theirs[1:])), (wrapped, bare)
    assert wrapped[1][0] > bare[1][0] and wrapped[2][0] > bare[2][0], (wrapped, bare)  # read across runs
