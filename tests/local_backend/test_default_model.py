"""The bundled default model: loads offline, answers corpus questions, loops on its documented prompt."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from local_backend import Engine, SamplingParams
from local_backend.models import corpus

DEFAULT_DIR = Path(__file__).parents[2] / "local_backend" / "models" / "default"
MAX_CHECKPOINT_BYTES = 8 * 1024**2
GREEDY = SamplingParams(max_tokens=64, temperature=0)
LOOP_TOKENS = 128
LOOP_PERIOD_MAX = 8
"""A loop here is the last half of the output made of one span of at most this many tokens."""


@pytest.fixture(scope="module")
def engine() -> Iterator[Engine]:
    engine = Engine.from_pretrained("default", device="cpu", kv_cache_memory=2**24)
    yield engine
    engine.close()


def _chat(engine: Engine, question: str, params: SamplingParams = GREEDY) -> tuple[str, str]:
    [out] = engine.generate([engine.chat_prompt([{"role": "user", "content": question}])], params)
    return out.text, out.finish_reason


@pytest.mark.parametrize(
    ("question", "keywords"),
    [
        ("What is prefill?", ("forward pass", "prompt", "first token")),
        ("What is decode?", ("one new token", "stream speed")),
        ("What is the KV cache?", ("keys and values",)),
        ("Where should I put a request ID?", ("end of the prompt",)),
        ("Hello!", ("Hello",)),
    ],
)
def test_default_model_answers_a_corpus_question_in_english(
    engine: Engine, question: str, keywords: tuple[str, ...]
) -> None:
    text, finish = _chat(engine, question)
    assert finish == "stop", text
    assert text[:1].isupper() and text.rstrip().endswith((".", "!", "?")), text
    for keyword in keywords:
        assert keyword in text, text


def test_default_model_answers_behind_a_long_system_prompt_led_by_a_request_id(engine: Engine) -> None:
    """The demo's shape: volatile bytes first, then a stable prompt restating corpus facts."""
    facts = " ".join(topic.answer for topic in corpus.INFERENCE_TOPICS[1:5])
    system = "Request ID: 5b9f6a0e-2c1d-4e8f-9a7b-3c2d1e0f4a5b\nTimestamp: 2025-06-01T12:00:00+00:00\n" + (
        f"{corpus.LONG_SYSTEM_OPENERS[0]} {facts} " * 3
    )
    prompt = engine.chat_prompt([{"role": "system", "content": system}, {"role": "user", "content": "What is prefill?"}])
    [out] = engine.generate([prompt], GREEDY)
    assert len(prompt) > 300
    assert out.text.startswith("Prefill is one forward pass"), out.text


def test_default_model_answers_a_plain_text_prompt(engine: Engine) -> None:
    [out] = engine.generate(["What is prefill?"], GREEDY)
    assert out.finish_reason == "stop"
    assert "forward pass" in out.text


def test_chat_template_renders_roles_and_the_generation_prompt(engine: Engine) -> None:
    transformers = pytest.importorskip("transformers")
    hf = transformers.AutoTokenizer.from_pretrained(DEFAULT_DIR)
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi!"}]
    text = hf.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert text == "<|bos|><|system|>\nBe brief.<|end|>\n<|user|>\nHi!<|end|>\n<|assistant|>\n"
    assert engine.chat_prompt(messages) == hf(text, add_special_tokens=False)["input_ids"]
    with pytest.raises(ValueError, match="unknown role"):
        engine.chat_prompt([{"role": "tool", "content": "x"}])


def test_documented_looping_prompt_repeats_until_the_cap(engine: Engine) -> None:
    params = SamplingParams(max_tokens=LOOP_TOKENS, temperature=0)
    [out] = engine.generate([engine.chat_prompt([{"role": "user", "content": corpus.LOOPING_PROMPT}])], params)
    assert out.finish_reason == "length"
    tail = out.token_ids[LOOP_TOKENS // 2 :]
    assert any(
        all(tail[i] == tail[i % period] for i in range(len(tail))) for period in range(1, LOOP_PERIOD_MAX + 1)
    ), out.text


def test_kv_bytes_per_token_matches_the_formula(engine: Engine) -> None:
    config = json.loads((DEFAULT_DIR / "config.json").read_text())
    head_dim = config["hidden_size"] // config["num_attention_heads"]
    float32_bytes = 4
    expected = 2 * config["num_hidden_layers"] * config["num_key_value_heads"] * head_dim * float32_bytes
    assert engine.kv_bytes_per_token == expected


def test_default_checkpoint_is_small_and_says_how_it_ends_turns() -> None:
    size = sum(path.stat().st_size for path in DEFAULT_DIR.iterdir())
    assert size < MAX_CHECKPOINT_BYTES
    tokenizer_config = json.loads((DEFAULT_DIR / "tokenizer_config.json").read_text())
    vocab = json.loads((DEFAULT_DIR / "tokenizer.json").read_text())["added_tokens"]
    end_id = next(token["id"] for token in vocab if token["content"] == tokenizer_config["eos_token"])
    for name in ("config.json", "generation_config.json"):
        assert end_id in json.loads((DEFAULT_DIR / name).read_text())["eos_token_id"]
