"""A GGUF file (llama.cpp's format, as Ollama and LM Studio keep models) → a `Checkpoint`.

The header is read within bounds and checked against the file (`gguf_file`). The config comes
from the `llama.*` metadata, each value checked for its type and range, the tokenizer from
`tokenizer.ggml.*` (`gguf_tokenizer`, its vocabulary checked here), the chat template from
`tokenizer.chat_template`; then every tensor's shape is checked against the config
(`checkpoint.check_tensors`), so a file whose metadata and tensors disagree is refused, naming
the key or tensor, before anything of its size is allocated. Tensors of the types in `KEPT_TENSOR_TYPES` are
read as their blocks (`quantized.QuantizedWeight`), which the loader keeps or dequantizes as `--quantization`
says; the others are dequantized with the `gguf` package's `dequantize` to float32 (logged once, naming the
types). All are renamed to the Hugging Face names, and the query and key rows put back in Hugging Face's order:
llama.cpp's converter interleaves each head's two rotary halves (its `permute`), which transformers' GGUF loader
also reverses. A file of another architecture, or with a tensor type not in `SUPPORTED_TENSOR_TYPES`, is
refused naming it.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from gguf import GGMLQuantizationType as Q
from gguf.quants import dequantize

from local_backend.kernels.quantized import QuantizedWeight, QuantType
from local_backend.model.checkpoint import LM_HEAD, Checkpoint, Tensors, check_tensors
from local_backend.model.config import ModelConfig
from local_backend.model.gguf_file import GGUFFile, read_gguf
from local_backend.model.gguf_tokenizer import build_tokenizer, check_vocabulary
from local_backend.model.tokenizer import TextTokenizer

logger = logging.getLogger(__name__)

SUPPORTED_ARCHITECTURES = ("llama",)
"""`general.architecture` values read: Llama 1-3, Mistral, SmolLM and TinyLlama files all say `llama`."""

SUPPORTED_TENSOR_TYPES = frozenset(
    {Q.F32, Q.F16, Q.BF16, Q.Q8_0, Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1, Q.Q2_K, Q.Q3_K, Q.Q4_K, Q.Q5_K, Q.Q6_K}
)
"""The float, legacy and K-quant types of llama.cpp's usual presets, which `gguf` dequantizes."""

KEPT_TENSOR_TYPES = frozenset(Q(kind) for kind in QuantType)
"""The quantized types the engine's kernels multiply by as blocks (`quantized.QuantType`: Q8_0, Q4_0, Q4_1, Q4_K,
Q5_K, Q6_K); the float types are floats already, and the others (Q5_0, Q5_1, Q2_K, Q3_K) are dequantized at load."""

_FLOAT_TYPES = frozenset({Q.F32, Q.F16, Q.BF16})

_GLOBAL_NAMES = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}
_LAYER_NAMES = {
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
"""llama.cpp's tensor names (`blk.N.<name>.weight`) → Hugging Face's (`model.layers.N.<name>.weight`)."""

TEMPLATE_KEY = "tokenizer.chat_template"

_LAYER = re.compile(r"blk\.(\d+)\.(\w+)\.(weight|bias)")


def open_gguf(path: Path) -> Checkpoint:
    """Read and check `path`'s header, metadata and vocabulary; refuse what the engine cannot run, naming it."""
    file = read_gguf(path)
    metadata = file.metadata
    architecture = metadata.get("general.architecture")
    if architecture not in SUPPORTED_ARCHITECTURES:
        raise file.fail(f"general.architecture={architecture!r} is not supported; supported: {SUPPORTED_ARCHITECTURES}")
    for tensor in file.tensors:
        if tensor.kind not in SUPPORTED_TENSOR_TYPES:
            supported = sorted(t.name for t in SUPPORTED_TENSOR_TYPES)
            raise file.fail(
                f"tensor {tensor.name!r} is of type {tensor.kind.name}, which is not supported; supported: {supported}"
            )
        if tensor.name == "rope_freqs.weight":
            raise file.fail("tensor 'rope_freqs.weight' (Llama 3.1's rescaled rotary frequencies) is not supported")
    hf_names = {_hf_name(tensor.name, file): tensor for tensor in file.tensors}
    raw_config = _hf_config(file, tied=LM_HEAD not in hf_names)
    try:
        config = ModelConfig.from_dict(raw_config)
    except ValueError as exc:
        raise file.fail(str(exc)) from None
    embedding = hf_names.get("model.embed_tokens.weight")
    try:
        check_vocabulary(metadata, None if embedding is None else embedding.shape[0])
    except ValueError as exc:
        raise file.fail(str(exc)) from None
    check_tensors(
        config,
        {hf: tensor.shape for hf, tensor in hf_names.items()},
        path.name,
        f"{architecture}.block_count",
        _gguf_name,
    )
    template = metadata.get(TEMPLATE_KEY)
    if template is not None and not isinstance(template, str):
        raise file.fail(f"{TEMPLATE_KEY} is not a string")

    def read_tokenizer(chat_template: str | None) -> TextTokenizer:
        try:
            tokenizer = build_tokenizer(metadata)
        except Exception as exc:  # the tokenizers library raises its own errors as bare `Exception`s
            raise file.fail(f"the tokenizer does not build from tokenizer.ggml.*: {exc}") from None
        return TextTokenizer(tokenizer, _tokenizer_config(metadata), chat_template or template)

    def tensors() -> Tensors:
        dequantized = sorted({t.kind.name for t in file.tensors if t.kind not in KEPT_TENSOR_TYPES | _FLOAT_TYPES})
        if dequantized:
            logger.info(
                "%s: tensors of types %s are dequantized to float at load; the kernels multiply %s blocks",
                path.name,
                ", ".join(dequantized),
                ", ".join(sorted(t.name for t in KEPT_TENSOR_TYPES)),
            )
        for name, tensor in hf_names.items():
            heads = {"q_proj.weight": config.num_heads, "k_proj.weight": config.num_kv_heads}.get(
                name.rpartition("self_attn.")[2]
            )
            if tensor.kind in KEPT_TENSOR_TYPES and len(tensor.shape) == 2:
                blocks = QuantizedWeight(QuantType(int(tensor.kind)), torch.from_numpy(np.array(file.raw(tensor))))
                rows = blocks.out_features
                yield (
                    name,
                    blocks if heads is None else blocks.rows(torch.from_numpy(_unpermute(np.arange(rows), heads))),
                )
                continue
            values = np.array(dequantize(file.raw(tensor), tensor.kind), dtype=np.float32)
            yield name, torch.from_numpy(values if heads is None else _unpermute(values, heads))

    return Checkpoint(config, None, read_tokenizer, tensors)


_COUNTS = (
    "block_count",
    "embedding_length",
    "feed_forward_length",
    "attention.head_count",
    "attention.head_count_kv",
    "attention.key_length",
    "rope.dimension_count",
    "context_length",
    "vocab_size",
)
"""`{arch}.*` keys that hold a positive integer where present."""
_REALS = ("attention.layer_norm_rms_epsilon", "rope.freq_base", "rope.scaling.factor")
"""`{arch}.*` keys that hold a finite positive number where present."""


def _hf_config(file: GGUFFile, tied: bool) -> dict[str, Any]:
    """The Hugging Face `config.json` keys the `llama.*` metadata gives, each value checked under its GGUF key."""
    metadata = file.metadata
    arch = metadata["general.architecture"]
    for names, types, kind in ((_COUNTS, (int,), "integer"), (_REALS, (int, float), "finite number")):
        for name in names:
            value = metadata.get(f"{arch}.{name}")
            if value is not None and not (type(value) in types and 0 < value < math.inf):
                raise file.fail(f"{arch}.{name}={value!r} is not a positive {kind}")

    def key(name: str, default: Any = None) -> Any:
        return metadata.get(f"{arch}.{name}", default)

    for required in ("block_count", "embedding_length", "feed_forward_length", "attention.head_count"):
        if key(required) is None:
            raise file.fail(f"{arch}.{required} is missing")
    if key("expert_count", 0):
        raise file.fail(f"{arch}.expert_count={key('expert_count')}: mixture-of-experts models are not supported")
    heads = key("attention.head_count")
    hidden = key("embedding_length")
    if heads % key("attention.head_count_kv", heads):
        raise file.fail(
            f"{arch}.attention.head_count={heads} is not a multiple of "
            f"{arch}.attention.head_count_kv={key('attention.head_count_kv')}"
        )
    tokens = metadata.get("tokenizer.ggml.tokens")
    scaling = key("rope.scaling.type", "none")
    eos = [metadata[k] for k in ("tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id") if k in metadata]
    return {
        "model_type": arch,
        "vocab_size": key("vocab_size") or (len(tokens) if isinstance(tokens, list) else 0),
        "hidden_size": hidden,
        "intermediate_size": key("feed_forward_length"),
        "num_hidden_layers": key("block_count"),
        "num_attention_heads": heads,
        "num_key_value_heads": key("attention.head_count_kv", heads),
        "head_dim": key("attention.key_length") or key("rope.dimension_count") or hidden // heads,
        "rms_norm_eps": key("attention.layer_norm_rms_epsilon", 1e-5),
        "rope_theta": key("rope.freq_base", 10000.0),
        "rope_scaling": None
        if scaling == "none"
        else {"rope_type": scaling, "factor": key("rope.scaling.factor", 1.0)},
        "max_position_embeddings": key("context_length", 2048),
        "tie_word_embeddings": tied,
        "eos_token_id": list(dict.fromkeys(eos)),
    }


def _tokenizer_config(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """`tokenizer_config.json`'s keys: special tokens by text, and whether `encode` adds BOS (llama.cpp's
    default: yes for SentencePiece vocabularies, no for byte-level ones)."""
    tokens = metadata["tokenizer.ggml.tokens"]
    bos, eos = metadata.get("tokenizer.ggml.bos_token_id"), metadata.get("tokenizer.ggml.eos_token_id")
    add_bos = metadata.get("tokenizer.ggml.add_bos_token", metadata.get("tokenizer.ggml.model") == "llama")
    return {
        "bos_token": None if bos is None else tokens[bos],
        "eos_token": None if eos is None else tokens[eos],
        "add_bos_token": add_bos,
    }


def _hf_name(name: str, file: GGUFFile) -> str:
    base, _, kind = name.rpartition(".")
    if base in _GLOBAL_NAMES:
        return f"{_GLOBAL_NAMES[base]}.{kind}"
    match = _LAYER.fullmatch(name)
    if match is None or match[2] not in _LAYER_NAMES:
        raise file.fail(f"unexpected tensor {name!r} for a llama model")
    return f"model.layers.{match[1]}.{_LAYER_NAMES[match[2]]}.{match[3]}"


def _gguf_name(hf_name: str) -> str:
    """`_hf_name` undone: the name llama.cpp gives the tensor Hugging Face calls `hf_name`."""
    base, _, kind = hf_name.rpartition(".")
    for ours, theirs in _GLOBAL_NAMES.items():
        if base == theirs:
            return f"{ours}.{kind}"
    layer, _, inner = base.removeprefix("model.layers.").partition(".")
    ours = next((ours for ours, theirs in _LAYER_NAMES.items() if theirs == inner), inner)
    return f"blk.{layer}.{ours}.{kind}"


def _unpermute(weight: np.ndarray, heads: int) -> np.ndarray:
    """Undo llama.cpp's `permute`: within each head, rows (0, 2, 4, ..., 1, 3, 5, ...) back to halves."""
    rows = weight.shape[0]
    return weight.reshape(heads, rows // heads // 2, 2, *weight.shape[1:]).swapaxes(1, 2).reshape(weight.shape)
