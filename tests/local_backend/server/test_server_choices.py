"""`n > 1` on Chat Completions and legacy Completions, through the real `openai` client: choice i is
the answer the seed `seed + i` gives alone (vLLM's rule), streamed or not, and usage sums them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from tests.local_backend.serving import Served, ServedEngines, wait_idle

N = 3
MAX_TOKENS = 6
SAMPLED = {"temperature": 1.0, "max_tokens": MAX_TOKENS, "extra_body": {"ignore_eos": True}}


@pytest.fixture(scope="module")
def served(serve: ServedEngines, llama_dir: Path) -> Served:
    return serve(llama_dir, max_model_len=256, kv_cache_memory=2**21)


@pytest.fixture
def client(served: Served) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=f"{served.url}/v1", api_key="x", max_retries=0) as client:
        yield client


def _create(client: openai.OpenAI, chat: bool, **kwargs):
    if chat:
        return client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "Hello"}], **kwargs)
    return client.completions.create(model="tiny", prompt="The quick brown fox", **kwargs)


def _text(choice, chat: bool) -> str:
    return choice.message.content if chat else choice.text


@pytest.mark.parametrize("chat", [True, False], ids=["chat", "completions"])
def test_each_choice_is_the_answer_its_own_seed_gives_alone(client, chat):
    response = _create(client, chat, n=N, seed=11, **SAMPLED)
    assert [c.index for c in response.choices] == list(range(N))
    alone = [_text(_create(client, chat, seed=11 + i, **SAMPLED).choices[0], chat) for i in range(N)]
    assert [_text(c, chat) for c in response.choices] == alone
    assert len(set(alone)) > 1
    assert response.usage.completion_tokens == N * MAX_TOKENS
    assert response.usage.prompt_tokens == _create(client, chat, **SAMPLED).usage.prompt_tokens


@pytest.mark.parametrize("chat", [True, False], ids=["chat", "completions"])
def test_streamed_choices_interleave_and_each_finishes_once_before_the_usage_chunk(client, served, chat):
    whole = _create(client, chat, n=N, seed=5, **SAMPLED)
    chunks = list(_create(client, chat, n=N, seed=5, stream=True, stream_options={"include_usage": True}, **SAMPLED))
    texts: dict[int, str] = {}
    finishes: dict[int, list[str]] = {}
    for chunk in chunks[:-1]:
        [choice] = chunk.choices
        texts[choice.index] = texts.get(choice.index, "") + ((choice.delta.content if chat else choice.text) or "")
        if choice.finish_reason:
            finishes.setdefault(choice.index, []).append(choice.finish_reason)
    assert [texts[i] for i in range(N)] == [_text(c, chat) for c in whole.choices]
    assert finishes == {i: ["length"] for i in range(N)}
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == N * MAX_TOKENS
    assert wait_idle(served.engine).blocks_used == 0


def test_greedy_choices_are_all_the_same_answer(client):
    response = _create(client, True, n=N, temperature=0, max_tokens=MAX_TOKENS)
    assert len({c.message.content for c in response.choices}) == 1 and len(response.choices) == N
