"""Tiny random checkpoints (Llama, Mistral, Qwen2, Qwen3) with a tiny byte-level BPE tokenizer, built once."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx2
import pytest
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

from local_backend import Engine
from tests.local_backend.serving import FUZZ_CLIENT_TIMEOUT_SECONDS, Served, ServedEngines, served_engine

CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "Prefill computes the prompt; decode emits one token at a time.",
    "A KV cache stores keys and values for every layer and token.",
    "Stable bytes go first, dynamic bytes last: prefix caching works.",
    "Hello world! How are you today? I am fine, thank you.",
    "user: what is a block table? assistant: a list of block ids.",
] * 20

CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
SPECIALS = ["<s>", "</s>", "<|im_start|>", "<|im_end|>"]
CUDA_ENV = "KVWISE_CUDA"
"""Set by `make test-cuda`: only then are the GPU tests collected (never by `make test` or CI)."""
collect_ignore = [] if os.environ.get(CUDA_ENV) else ["engine/test_engine_cuda.py"]


def _tokenizer(directory: Path) -> int:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=384, special_tokens=SPECIALS, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(CORPUS, trainer)
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 0)])
    tok.save(str(directory / "tokenizer.json"))
    config = {"bos_token": "<s>", "eos_token": "</s>", "chat_template": CHAT_TEMPLATE}
    (directory / "tokenizer_config.json").write_text(json.dumps(config))
    return tok.get_vocab_size()


def _build(directory: Path, kind: str) -> Path:
    import transformers

    directory.mkdir()
    vocab = _tokenizer(directory)
    common = dict(
        vocab_size=vocab,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        bos_token_id=0,
        eos_token_id=1,
        initializer_range=0.25,
    )
    if kind == "llama":
        rope = {
            "rope_type": "llama3",
            "factor": 4.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 64,
            "rope_theta": 10000.0,
        }
        config = transformers.LlamaConfig(**common, rope_parameters=rope)
        model_cls = transformers.LlamaForCausalLM
    elif kind == "mistral":
        config = transformers.MistralConfig(**common, sliding_window=4096)
        model_cls = transformers.MistralForCausalLM
    elif kind == "qwen2":
        config = transformers.Qwen2Config(**common, tie_word_embeddings=True)
        model_cls = transformers.Qwen2ForCausalLM
    else:
        config = transformers.Qwen3Config(**common, head_dim=32)
        model_cls = transformers.Qwen3ForCausalLM
    torch.manual_seed(0)
    model = model_cls(config)
    with torch.no_grad():  # make the biases and norms matter, as in a trained model
        for name, param in model.named_parameters():
            if name.endswith("bias") or "norm" in name:
                param.add_(torch.randn_like(param) * 0.1)
    model.save_pretrained(directory)
    return directory


@pytest.fixture(scope="session")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("checkpoints")
    return {kind: _build(root / kind, kind) for kind in ("llama", "mistral", "qwen2", "qwen3")}


@pytest.fixture(scope="session")
def llama_dir(checkpoints: dict[str, Path]) -> Path:
    return checkpoints["llama"]


@pytest.fixture(scope="session")
def hf_greedy(checkpoints: dict[str, Path]) -> Callable[[str, list[int], int], list[int]]:
    """Reference tokens: transformers' greedy `generate()` on one unpadded prompt."""
    import transformers

    models_ = {}

    def run(kind: str, prompt: list[int], max_new_tokens: int) -> list[int]:
        if kind not in models_:
            models_[kind] = transformers.AutoModelForCausalLM.from_pretrained(checkpoints[kind]).eval()
        model = models_[kind]
        out = model.generate(
            torch.tensor([prompt]),
            max_new_tokens=max_new_tokens,
            min_new_tokens=max_new_tokens,
            do_sample=False,
            eos_token_id=None,
            pad_token_id=0,
        )
        return out[0, len(prompt) :].tolist()

    return run


@pytest.fixture
def make_engine(checkpoints: dict[str, Path]) -> Callable[..., Engine]:
    """A fresh engine on a tiny checkpoint; keyword arguments go to `from_pretrained`. float32 unless asked
    otherwise: the tokens these tests compare (transformers' float32, the torch forms') are float32's, and
    `dtype="auto"` is bfloat16 on a CPU with AVX512-BF16 or AMX (`dtype_choice`)."""
    engines: list[Engine] = []

    def make(kind: str = "llama", **kwargs: object) -> Engine:
        options: dict[str, object] = dict(device="cpu", dtype="float32", max_model_len=256, kv_cache_memory=2**20)
        options.update(kwargs)
        engine = Engine.from_pretrained(checkpoints[kind], **options)
        engines.append(engine)
        return engine

    yield make
    for engine in engines:
        engine.close()


@pytest.fixture(scope="session")
def serve() -> Iterator[ServedEngines]:
    """`serve(checkpoint, app_options, **engine_options) -> Served`: one server per configuration per session."""
    engines = ServedEngines()
    yield engines
    engines.close()


@pytest.fixture(scope="module")
def fuzz_served(llama_dir: Path) -> Iterator[Served]:
    """A server small enough that fuzzed requests reach its every refusal fast (a 48-token context)."""
    with served_engine(llama_dir, max_model_len=48, kv_cache_memory=2**20) as served:
        yield served


@pytest.fixture(scope="module")
def fuzz_http(fuzz_served: Served) -> Iterator[httpx2.Client]:
    with httpx2.Client(base_url=fuzz_served.url, timeout=FUZZ_CLIENT_TIMEOUT_SECONDS) as client:
        yield client
