"""The bundled default model: loads offline, answers corpus questions, loops on its documented prompt,
and, served with tools offered and `tool_choice` left to it, calls the right one and answers from its result."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import jsonschema
import openai
import pytest

from local_backend import Engine, SamplingParams
from local_backend.model.tokenizer import TextTokenizer
from local_backend.model.tool_prompt import call_text, fold
from local_backend.server.tools import prompt_ids
from tests.local_backend.serving import served_engine
from training import corpus, tool_corpus

DEFAULT_DIR = Path(__file__).parents[2] / "local_backend" / "models" / "default"
MAX_CHECKPOINT_BYTES = 8 * 1024**2
GREEDY = SamplingParams(max_tokens=64, temperature=0)
LOOP_TOKENS = 128
LOOP_PERIOD_MAX = 8
"""A loop here is the last half of the output made of one span of at most this many tokens."""
TOOLS = [tool_corpus.WEATHER_TOOL.as_openai()]
TOOL_LOOPS = [
    ("What is the weather in Paris?", "Paris", "rainy"),
    ("How is the weather in Tokyo today?", "Tokyo", "snowy"),
]
"""A question, the city its call must name, and the conditions the tool reports (the answer must say them)."""


@pytest.fixture(scope="module")
def engine() -> Iterator[Engine]:
    engine = Engine.from_pretrained("default", device="cpu", dtype="float32", kv_cache_memory=2**24)
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
    prompt = engine.chat_prompt(
        [{"role": "system", "content": system}, {"role": "user", "content": "What is prefill?"}]
    )
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


def test_the_corpus_writes_tool_dialogues_as_the_server_prompts_them() -> None:
    """The training text of a tool loop, up to the answer, is token for token the server's prompt of it."""
    tokenizer = TextTokenizer.from_dir(DEFAULT_DIR)
    tools = [tool_corpus.WEATHER_TOOL]
    for seed in range(3):
        messages = [{"role": "system", "content": "Be concise."}, *tool_corpus.tool_loop(random.Random(seed))[:3]]
        text = corpus.chat_text(fold(messages, tools))
        assert prompt_ids(tokenizer, messages, tools) == tokenizer.encode(text, add_special_tokens=False)


@pytest.fixture(scope="module")
def server_url() -> Iterator[str]:
    with served_engine("default", max_model_len=1024, kv_cache_memory=2**23) as served:
        yield served.url


@pytest.mark.parametrize(("question", "city", "conditions"), TOOL_LOOPS, ids=[loop[1] for loop in TOOL_LOOPS])
def test_default_model_calls_the_weather_tool_and_answers_from_its_result_over_openai(
    server_url: str, question: str, city: str, conditions: str
) -> None:
    messages: list[dict[str, Any]] = [{"role": "user", "content": question}]
    with openai.OpenAI(base_url=f"{server_url}/v1", api_key="x", max_retries=0) as client:
        first = client.chat.completions.create(
            model="tiny",
            messages=messages,
            tools=TOOLS,
            tool_choice="auto",
            temperature=0,
            max_tokens=64,  # type: ignore[arg-type]
        )
        [choice] = first.choices
        assert choice.finish_reason == "tool_calls", choice.message
        [call] = choice.message.tool_calls or []
        assert call.function.name == "get_weather"
        jsonschema.validate(json.loads(call.function.arguments), tool_corpus.WEATHER_TOOL.parameters)
        assert json.loads(call.function.arguments) == {"city": city}
        messages += [
            choice.message.model_dump(exclude_none=True),
            {"role": "tool", "tool_call_id": call.id, "content": json.dumps({"conditions": conditions})},
        ]
        second = client.chat.completions.create(
            model="tiny",
            messages=messages,
            tools=TOOLS,
            tool_choice="auto",
            temperature=0,
            max_tokens=48,  # type: ignore[arg-type]
        )
    [choice] = second.choices
    assert choice.finish_reason == "stop" and not choice.message.tool_calls, choice.message
    assert conditions in (choice.message.content or ""), choice.message


def test_default_model_calls_the_weather_tool_and_answers_from_its_result_over_anthropic(server_url: str) -> None:
    question, city, conditions = TOOL_LOOPS[0]
    tool = tool_corpus.WEATHER_TOOL
    tools = [{"name": tool.name, "description": tool.description, "input_schema": tool.parameters}]
    messages: list[dict[str, Any]] = [{"role": "user", "content": question}]
    with anthropic.Anthropic(base_url=server_url, api_key="x", max_retries=0) as client:
        first = client.messages.create(
            model="tiny",
            max_tokens=64,
            messages=messages,
            tools=tools,  # type: ignore[arg-type]
            tool_choice={"type": "auto"},
            extra_body={"temperature": 0},
        )
        assert first.stop_reason == "tool_use", first.content
        [use] = [block for block in first.content if block.type == "tool_use"]
        assert use.name == tool.name and use.input == {"city": city}
        messages += [
            {"role": "assistant", "content": [block.model_dump(exclude_none=True) for block in first.content]},
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": use.id, "content": json.dumps({"conditions": conditions})}
                ],
            },
        ]
        second = client.messages.create(
            model="tiny",
            max_tokens=48,
            messages=messages,
            tools=tools,  # type: ignore[arg-type]
            extra_body={"temperature": 0},
        )
    assert second.stop_reason == "end_turn", second.content
    text = "".join(block.text for block in second.content if block.type == "text")
    assert conditions in text, text


def test_default_model_calls_with_the_city_asked_about_for_all_but_one_trained_city(engine: Engine) -> None:
    """The model card's figure: a 3.4M-parameter model mixes up a city now and then (Sydney -> Cairo)."""
    tools = [tool_corpus.WEATHER_TOOL]
    wrong = {}
    for city in tool_corpus.CITIES:
        messages = [{"role": "user", "content": f"What is the weather in {city}?"}]
        [out] = engine.generate([prompt_ids(engine.tokenizer, messages, tools)], GREEDY)
        assert out.text.startswith('<tool_call>\n{"name": "get_weather", "arguments": {"city": "'), out.text
        if out.text != call_text("get_weather", {"city": city}):
            wrong[city] = out.text
    assert len(wrong) <= 1, wrong


def test_default_model_asked_about_the_weather_with_no_tool_offered_calls_none(engine: Engine) -> None:
    text, finish = _chat(engine, "What is the weather in Paris?")
    assert finish == "stop" and text == tool_corpus.NO_TOOL_ANSWER, text


def test_default_model_answers_an_ordinary_question_with_tools_offered_without_calling_one(server_url: str) -> None:
    with openai.OpenAI(base_url=f"{server_url}/v1", api_key="x", max_retries=0) as client:
        answer = client.chat.completions.create(
            model="tiny",
            messages=[{"role": "user", "content": "What is prefill?"}],
            temperature=0,
            max_tokens=64,
            tools=TOOLS,
            tool_choice="auto",  # type: ignore[arg-type]
        )
    [choice] = answer.choices
    assert choice.finish_reason == "stop" and not choice.message.tool_calls
    assert "forward pass" in (choice.message.content or "")


def test_the_tool_corpus_is_the_same_for_the_same_seed_and_asks_about_every_city() -> None:
    first, again = corpus.build_tool_corpus(0), corpus.build_tool_corpus(0)
    assert first == again
    text = "\n".join("".join(piece for piece, _ in sample) for sample in first)
    for city in tool_corpus.CITIES:
        assert f'"name": "get_weather", "arguments": {{"city": "{city}"}}' in text


def test_the_tool_corpus_trains_calls_and_answers_but_not_listings_or_results() -> None:
    pieces = [piece for sample in corpus.build_tool_corpus(0) for piece in sample]
    trained = [text for text, on in pieces if on]
    untrained = [text for text, on in pieces if not on]
    assert any("<tool_call>" in piece for piece in trained)
    assert not any("<tools>" in piece or "<tool_response>" in piece for piece in trained)
    assert any("<tools>" in piece for piece in untrained) and any("<tool_response>" in piece for piece in untrained)
