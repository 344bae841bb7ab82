"""What the engine reads from a model's files, whatever their format (a Hugging Face directory, a GGUF file),
and the check that a file's tensors are the ones its config implies, made before any of them is read."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import torch

from local_backend.kernels.quantized import QuantizedWeight
from local_backend.model.config import ModelConfig
from local_backend.model.tokenizer import TextTokenizer


class ModelFileError(ValueError):
    """A model file the engine refuses as it is: the message is one line naming the file, the key or tensor,
    and the defect, and nothing of the file's size has been allocated when it is raised."""


Tensors = Iterator[tuple[str, torch.Tensor | QuantizedWeight]]
"""Tensors under their Hugging Face names (`model.layers.0.self_attn.q_proj.weight`), each read as reached: a
GGUF file's Q8_0, Q4_0, Q4_1, Q4_K, Q5_K and Q6_K matrices as their blocks, which the loader keeps or dequantizes."""


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """A model's files, read as far as planning the engine needs; the tokenizer and tensors on demand.

    `open_checkpoint("smollm2-135m-instruct")` (in `model_names`) gives one for any name `--model` takes.
    """

    config: ModelConfig
    generation_folder: Path | None
    """Where `generation_config.json` may lie (a Hugging Face directory); None for a single file."""
    read_tokenizer: Callable[[str | None], TextTokenizer]
    """The tokenizer, the given chat template replacing the checkpoint's own."""
    tensors: Callable[[], Tensors]
    """The weights, read one tensor at a time, in the format's own dtype, as blocks, or dequantized to float32."""


Shape = tuple[int, ...]

_LAYER_PREFIX = re.compile(r"model\.layers\.(\d+)\.")
_IGNORED = "rotary_emb."
"""Tensors some checkpoints keep that the engine recomputes (rotary `inv_freq`)."""
LM_HEAD = "lm_head.weight"
"""The output projection: absent, or ignored, where the embedding is tied to it."""


def check_tensors(
    cfg: ModelConfig, shapes: Mapping[str, Shape], source: str, layer_key: str, shown: Callable[[str], str] = str
) -> None:
    """Refuse, naming the tensor, a checkpoint whose tensors (Hugging Face names → shapes) are not the ones `cfg`
    implies: the layer count against the layers present first (a claim of a million layers costs nothing), then
    each tensor missing, unexpected or of another shape. `layer_key` names the layer count in the file's own
    terms, `shown` a tensor's name."""
    present = {int(match[1]) for name in shapes if (match := _LAYER_PREFIX.match(name))}
    missing_layer = next((layer for layer in range(cfg.num_layers) if layer not in present), None)
    if missing_layer is not None:
        raise ModelFileError(
            f"{source}: {layer_key}={cfg.num_layers}, but the file holds no tensor of layer {missing_layer}"
        )
    if present and max(present) >= cfg.num_layers:
        raise ModelFileError(
            f"{source}: {layer_key}={cfg.num_layers}, but the file holds tensors of layer {max(present)}"
        )
    expected = expected_shapes(cfg)
    for name, shape in shapes.items():
        if name in expected and tuple(shape) != expected[name]:
            raise ModelFileError(
                f"{source}: tensor {shown(name)!r} has shape {list(shape)}, but the config implies "
                f"{list(expected[name])}"
            )
        if name not in expected and _IGNORED not in name and not (cfg.tie_word_embeddings and name == LM_HEAD):
            raise ModelFileError(f"{source}: unexpected tensor {shown(name)!r} for a {cfg.model_type} model")
    missing = [name for name in expected if name not in shapes]
    if missing:
        raise ModelFileError(f"{source}: tensor {shown(missing[0])!r} is missing ({len(missing)} missing)")


def expected_shapes(cfg: ModelConfig) -> dict[str, Shape]:
    """Every tensor `cfg` implies, under its Hugging Face name, in torch's shape order (`[out, in]`)."""
    hidden, q, kv, ff, head = (
        cfg.hidden_size,
        cfg.num_heads * cfg.head_dim,
        cfg.num_kv_heads * cfg.head_dim,
        cfg.intermediate_size,
        cfg.head_dim,
    )
    layer: dict[str, Shape] = {
        "input_layernorm.weight": (hidden,),
        "post_attention_layernorm.weight": (hidden,),
        "self_attn.q_proj.weight": (q, hidden),
        "self_attn.k_proj.weight": (kv, hidden),
        "self_attn.v_proj.weight": (kv, hidden),
        "self_attn.o_proj.weight": (hidden, q),
        "mlp.gate_proj.weight": (ff, hidden),
        "mlp.up_proj.weight": (ff, hidden),
        "mlp.down_proj.weight": (hidden, ff),
    }
    if cfg.qkv_bias:
        layer |= {"self_attn.q_proj.bias": (q,), "self_attn.k_proj.bias": (kv,), "self_attn.v_proj.bias": (kv,)}
    if cfg.o_bias:
        layer["self_attn.o_proj.bias"] = (hidden,)
    if cfg.mlp_bias:
        layer |= {"mlp.gate_proj.bias": (ff,), "mlp.up_proj.bias": (ff,), "mlp.down_proj.bias": (hidden,)}
    if cfg.qk_norm:
        layer |= {"self_attn.q_norm.weight": (head,), "self_attn.k_norm.weight": (head,)}
    shapes = {"model.embed_tokens.weight": (cfg.vocab_size, hidden), "model.norm.weight": (hidden,)}
    if not cfg.tie_word_embeddings:
        shapes[LM_HEAD] = (cfg.vocab_size, hidden)
    shapes |= {
        f"model.layers.{index}.{name}": shape for index in range(cfg.num_layers) for name, shape in layer.items()
    }
    return shapes
