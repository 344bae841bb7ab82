"""`logprobs` / `top_logprobs` through the real `openai` client against the bundled model: each
token's log-probability is transformers' log-softmax of the same logits, streamed or not, and the
per-request logits processor behind it touches only its own request."""

from __future__ import annotations

from collections.abc import Iterator

import openai
import pytest
import torch

from local_backend import Engine, SamplingParams
from local_backend.server import create_app, serve_in_thread
from local_backend.server.logprobs import TokenLogprob, completion_logprobs

TOP = 3
MESSAGES = [{"role": "user", "content": "What is the capital of France?"}]
GREEDY = {"model": "tiny", "max_tokens": 8, "temperature": 0, "extra_body": {"ignore_eos": True}}
TOLERANCE = 1e-3


@pytest.fixture(scope="module")
def engine() -> Iterator[Engine]:
    with Engine.from_pretrained(
        "default", device="cpu", dtype="float32", max_model_len=256, kv_cache_memory=2**22
    ) as engine:
        yield engine


@pytest.fixture(scope="module")
def client(engine: Engine) -> Iterator[openai.OpenAI]:
    with serve_in_thread(create_app(engine, model_name="tiny")) as url:
        with openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0) as client:
            yield client


@pytest.fixture(scope="module")
def reference(engine: Engine):
    """log_softmax of transformers' logits for each output position of (prompt, output)."""
    import transformers

    from local_backend.model.model_names import resolve_model

    model = transformers.AutoModelForCausalLM.from_pretrained(resolve_model("default"), dtype=torch.float32)

    def run(prompt: list[int], output: list[int]) -> torch.Tensor:
        with torch.no_grad():
            logits = model(torch.tensor([prompt + output])).logits[0, len(prompt) - 1 : -1]
        return torch.log_softmax(logits, dim=-1)

    return run


@pytest.mark.parametrize("temperature", [0, 1.5])
def test_chat_logprobs_are_the_models_raw_log_softmax_with_the_top_alternatives(client, engine, reference, temperature):
    request = {**GREEDY, "temperature": temperature, "seed": 3}
    response = client.chat.completions.create(messages=MESSAGES, logprobs=True, top_logprobs=TOP, **request)
    [choice] = response.choices
    content = choice.logprobs.content
    prompt = engine.chat_prompt(MESSAGES)
    params = SamplingParams(max_tokens=8, temperature=temperature, seed=3, ignore_eos=True)
    [alone] = engine.generate([prompt], params)  # the same seeded draws: the same tokens
    assert len(content) == response.usage.completion_tokens == len(alone.token_ids) == 8
    assert [c.token for c in content] == [engine.tokenizer.decode([t]) for t in alone.token_ids]
    rows = reference(prompt, list(alone.token_ids))
    for entry, row, token in zip(content, rows, alone.token_ids):
        assert entry.logprob == pytest.approx(row[token].item(), abs=TOLERANCE)  # raw: no temperature in it
        assert [t.logprob for t in entry.top_logprobs] == pytest.approx(row.topk(TOP).values.tolist(), abs=TOLERANCE)
        assert entry.bytes == list(entry.token.encode())
    if temperature == 0:
        assert all(entry.top_logprobs[0].token == entry.token for entry in content)


def test_streamed_chat_logprobs_equal_the_whole_answers(client):
    whole = client.chat.completions.create(messages=MESSAGES, logprobs=True, top_logprobs=TOP, **GREEDY)
    chunks = list(
        client.chat.completions.create(messages=MESSAGES, logprobs=True, top_logprobs=TOP, stream=True, **GREEDY)
    )
    streamed = [e for c in chunks if c.choices and c.choices[0].logprobs for e in c.choices[0].logprobs.content]
    expected = whole.choices[0].logprobs.content
    assert [e.token for e in streamed] == [e.token for e in expected]
    assert [e.logprob for e in streamed] == pytest.approx([e.logprob for e in expected], abs=1e-5)


@pytest.mark.parametrize("stream", [False, True])
def test_legacy_logprobs_give_tokens_offsets_and_top_dicts(client, stream):
    kwargs = dict(prompt="What is prefill?", logprobs=2, **GREEDY)  # 8 tokens of text, no end token
    if stream:
        chunks = [c.choices[0] for c in client.completions.create(stream=True, **kwargs) if c.choices]
        text = "".join(c.text for c in chunks)
        tokens = [t for c in chunks if c.logprobs for t in c.logprobs.tokens]
        values = [v for c in chunks if c.logprobs for v in c.logprobs.token_logprobs]
        offsets = [o for c in chunks if c.logprobs for o in c.logprobs.text_offset]
        tops = [d for c in chunks if c.logprobs for d in c.logprobs.top_logprobs]
    else:
        [choice] = client.completions.create(**kwargs).choices
        text, lp = choice.text, choice.logprobs
        tokens, values, offsets, tops = lp.tokens, lp.token_logprobs, lp.text_offset, lp.top_logprobs
    assert "".join(tokens) == text and len(tokens) == 8
    assert offsets == [sum(map(len, tokens[:i])) for i in range(len(tokens))]
    assert all(len(top) == 2 and max(top.values()) == pytest.approx(v) and v <= 0 for top, v in zip(tops, values))


def test_legacy_top_dicts_keep_the_likelier_of_two_tokens_with_the_same_text():
    end_tokens = {1: "", 2: ""}  # both end tokens decode to ''
    entry = TokenLogprob(token=2, logprob=-0.5, top=((2, -0.5), (1, -3.0)))
    logprobs = completion_logprobs([entry], lambda token: end_tokens.get(token, "x"), 0)
    assert logprobs["top_logprobs"] == [{"": -0.5}] and logprobs["token_logprobs"] == [-0.5]


@pytest.mark.parametrize(
    ("request_", "param"),
    [({"top_logprobs": 2}, "top_logprobs"), ({"logprobs": True, "top_logprobs": 21}, "top_logprobs")],
)
def test_bad_logprobs_requests_are_refused_naming_the_field(client, request_, param):
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(messages=MESSAGES, **GREEDY, **request_)
    assert caught.value.param == param


def test_legacy_logprobs_with_echo_are_refused(client):
    with pytest.raises(openai.BadRequestError) as caught:
        client.completions.create(prompt="Hello", echo=True, logprobs=1, **GREEDY)
    assert caught.value.param == "logprobs"


def test_a_requests_logits_processor_decides_its_tokens_and_leaves_the_others_alone(engine):
    forced = 42
    calls: list[int] = []

    def force(output: list[int], row: torch.Tensor) -> torch.Tensor:
        calls.append(len(output))
        row.fill_(float("-inf"))
        row[forced] = 0.0
        return row

    plain = SamplingParams(max_tokens=5, temperature=0, ignore_eos=True)
    [alone] = engine.generate(["Hello"], plain)
    with_processor = SamplingParams(max_tokens=5, temperature=1.0, ignore_eos=True, logits_processor=force)
    constrained, other = engine.generate(["Hello", "Hello"], [with_processor, plain])
    assert constrained.token_ids == (forced,) * 5 and calls == [0, 1, 2, 3, 4]
    assert other.token_ids == alone.token_ids
