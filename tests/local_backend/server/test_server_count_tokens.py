"""`client.messages.count_tokens` against the real server: the count is exactly the prompt tokens the
server then reports for the same request, streamed or not."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import pytest

from tests.local_backend.serving import Served, ServedEngines

PROMPTS: list[dict[str, Any]] = [
    {"messages": [{"role": "user", "content": "Hello"}]},
    {
        "messages": [
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Hello!"},
            {"role": "user", "content": [{"type": "text", "text": "What is a block table?"}]},
        ]
    },
    {"system": "You answer briefly.", "messages": [{"role": "user", "content": "What is prefill?"}]},
    {
        "system": [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}],
        "messages": [{"role": "user", "content": "What is decode?"}],
    },
]


@pytest.fixture(scope="module")
def served(serve: ServedEngines, llama_dir: Path) -> Served:
    return serve(llama_dir, max_model_len=256, kv_cache_memory=2**21)


@pytest.fixture
def client(served: Served) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(base_url=served.url, api_key="x", max_retries=0) as client:
        yield client


def _prompt_tokens(usage: Any) -> int:
    return usage.input_tokens + usage.cache_read_input_tokens + usage.cache_creation_input_tokens


@pytest.mark.parametrize("prompt", PROMPTS)
def test_the_count_equals_the_prompt_tokens_the_message_reports(client, prompt):
    counted = client.messages.count_tokens(model="tiny", **prompt).input_tokens
    message = client.messages.create(model="tiny", max_tokens=2, **prompt)
    with client.messages.stream(model="tiny", max_tokens=2, **prompt) as stream:
        streamed = stream.get_final_message()
    assert counted == _prompt_tokens(message.usage) == _prompt_tokens(streamed.usage) > 0


def test_a_longer_prompt_counts_more_and_a_bad_one_is_refused_like_the_message(client):
    short = client.messages.count_tokens(model="tiny", **PROMPTS[0]).input_tokens
    longer = client.messages.count_tokens(model="tiny", **PROMPTS[2]).input_tokens
    assert longer > short
    with pytest.raises(anthropic.BadRequestError) as counted:
        client.messages.count_tokens(model="tiny", messages=[{"role": "robot", "content": "x"}])
    with pytest.raises(anthropic.BadRequestError) as created:
        client.messages.create(model="tiny", max_tokens=2, messages=[{"role": "robot", "content": "x"}])
    assert counted.value.body["error"]["message"] == created.value.body["error"]["message"]
