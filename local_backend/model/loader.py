"""A checkpoint's tensors → a ready `CausalLM`, packed in place; a Hugging Face directory read as a `Checkpoint`,
its tensors' shapes checked against `config.json` from the safetensors headers before any tensor is read."""

from __future__ import annotations

import logging
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from tokenizers import Tokenizer

from local_backend import _constants as C
from local_backend.kernels import ops
from local_backend.kernels.kernel_choices import onednn_prepacks
from local_backend.kernels.quantized import (
    BLOCK_WEIGHTS,
    QUANTIZATION_AUTO,
    QUANTIZATION_NONE,
    QuantizedWeight,
    QuantType,
    quantize_q8_0,
)
from local_backend.model import dtype_choice
from local_backend.model.checkpoint import Checkpoint, ModelFileError, Shape, Tensors, check_tensors
from local_backend.model.config import ModelConfig
from local_backend.model.llama import CausalLM, Embedding, Linear
from local_backend.model.tokenizer import TextTokenizer

logger = logging.getLogger(__name__)

REQUIRED_FILES = ("config.json", "tokenizer.json", "tokenizer_config.json")

_PACKED = {
    "q_proj": ("qkv_proj", 0),
    "k_proj": ("qkv_proj", 1),
    "v_proj": ("qkv_proj", 2),
    "gate_proj": ("gate_up_proj", 0),
    "up_proj": ("gate_up_proj", 1),
}
"""Hugging Face projection → (our packed projection, shard index inside it)."""


def resolve_device(device: str | torch.device, dtype: str | torch.dtype) -> tuple[torch.device, torch.dtype]:
    """`"auto"`: CUDA when available, else CPU; the dtype as `dtype_choice.choose` resolves it (names as in `torch`)."""
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    dev = torch.device(device)
    return dev, dtype_choice.choose(dev, dtype).dtype


def default_kv_cache_memory(device: torch.device) -> int:
    """Bytes for the KV pool when none is given: a fixed budget on CPU, a share of free GPU memory."""
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return int(free * C.DEFAULT_KV_CACHE_FRACTION_CUDA)
    return C.DEFAULT_KV_CACHE_MEMORY_CPU


def open_directory(directory: Path) -> Checkpoint:
    """A Hugging Face checkpoint directory: `config.json`, `*.safetensors`, `tokenizer.json`,
    `tokenizer_config.json`."""
    check_checkpoint(directory)
    config = ModelConfig.from_file(directory / "config.json")
    check_tensors(config, _safetensors_shapes(directory), directory.name, "num_hidden_layers")
    _check_vocabulary(directory / "tokenizer.json", config)
    return Checkpoint(
        config, directory, lambda template: TextTokenizer.from_dir(directory, template), lambda: _safetensors(directory)
    )


def _safetensors(directory: Path) -> Tensors:
    for file in sorted(directory.glob("*.safetensors")):
        with safe_open(file, framework="pt") as handle:
            for name in handle.keys():
                yield name, handle.get_tensor(name)


def _safetensors_shapes(directory: Path) -> dict[str, Shape]:
    """Every tensor's shape, from the files' headers (the `safetensors` library checks each header against its
    file: offsets inside it, in order, none overlapping); a tensor in two files is refused."""
    shapes: dict[str, Shape] = {}
    for file in sorted(directory.glob("*.safetensors")):
        try:
            with safe_open(file, framework="pt") as handle:
                for name in handle.keys():
                    if name in shapes:
                        raise ModelFileError(f"{file.name}: tensor {name!r} is also in another file")
                    shapes[name] = tuple(handle.get_slice(name).get_shape())
        except SafetensorError as exc:
            raise ModelFileError(f"{file.name}: {exc}") from None
    return shapes


def _check_vocabulary(path: Path, cfg: ModelConfig) -> None:
    """Refuse a `tokenizer.json` whose ids pass the embedding's rows (the step that met one would fail), with a
    token past `MAX_TOKEN_BYTES`, or with an empty added token."""
    try:
        tokenizer = Tokenizer.from_file(str(path))
    except Exception as exc:  # the tokenizers library raises its errors as bare `Exception`s
        raise ModelFileError(f"{path.name}: does not load: {exc}") from None
    for token, index in tokenizer.get_vocab(with_added_tokens=True).items():
        if index >= cfg.vocab_size:
            raise ModelFileError(
                f"{path.name}: token {token[:80]!r} has id {index}, past the vocab_size="
                f"{cfg.vocab_size} rows of the embedding"
            )
        if len(token) * 4 > C.MAX_TOKEN_BYTES and len(token.encode()) > C.MAX_TOKEN_BYTES:
            raise ModelFileError(
                f"{path.name}: token {index} is {len(token.encode()):,} bytes, more than the "
                f"limit of {C.MAX_TOKEN_BYTES:,}"
            )
    for index, added in tokenizer.get_added_tokens_decoder().items():
        if not added.content:
            raise ModelFileError(f"{path.name}: added token {index} is empty")


def check_checkpoint(directory: Path) -> None:
    """Raise one `FileNotFoundError` naming every file the directory lacks."""
    if not directory.is_dir():
        raise FileNotFoundError(f"checkpoint directory {directory} does not exist")
    missing = [name for name in REQUIRED_FILES if not (directory / name).is_file()]
    if not any(directory.glob("*.safetensors")):
        missing.append("*.safetensors")
    if missing:
        raise FileNotFoundError(
            f"checkpoint directory {directory} is missing {', '.join(missing)}; a Hugging Face "
            "Llama-family checkpoint (config.json, *.safetensors, tokenizer.json, "
            "tokenizer_config.json) is expected"
        )


def load_model(
    tensors: Tensors, cfg: ModelConfig, device: torch.device, dtype: torch.dtype, quantization: str = QUANTIZATION_NONE
) -> CausalLM:
    """Build the model without initialising it, then copy each of `tensors` into its slot, in `dtype`.

    Projection weights land transposed in `weight_t`, q/k/v and gate/up side by side in their
    packed matrix; with tied embeddings the lm_head is the embedding's transpose (a copy on CPU,
    where decode streams it faster, a view elsewhere). Its layers run the ops chosen here, once
    (`ops.select`). On CPU every projection also gets oneDNN's prepacked weight for batched rows
    (`Linear.pack`), in float32, and in bfloat16 where oneDNN multiplies it natively
    (`kernel_choices.onednn_prepacks`).

    `quantization` (`quantized.QUANTIZATIONS`): `none` dequantizes every block to `dtype`; `auto` keeps a GGUF
    file's Q8_0, Q4_0, Q4_1, Q4_K, Q5_K and Q6_K projections and embedding as blocks (`Linear.keep_quantized`; a
    tied lm_head shares the embedding's); `q8_0` keeps those of Q8_0 and quantizes every other one to Q8_0. Blocks
    are kept only where the native CPU kernels multiply by them; elsewhere they are dequantized, and the log says
    so once.
    """
    chosen = ops.select(device, dtype, cfg.head_dim)
    keeps = quantization != QUANTIZATION_NONE and isinstance(chosen, ops.NativeOps)
    if quantization != QUANTIZATION_NONE and not keeps:
        logger.info(
            "quantization=%s: every weight is dequantized to %s at load; only the native CPU kernels multiply "
            "by quantized blocks, and this engine runs on %s",
            quantization,
            dtype,
            device,
        )
    with torch.device("meta"):
        model = CausalLM(cfg, dtype, chosen)
    model.to_empty(device=device)  # allocated, not written: the pages of a weight kept quantized never become resident
    params = dict(model.named_parameters())
    quantizable = {name: m for name, m in model.named_modules() if isinstance(m, (Linear, Embedding))}
    shard_sizes = {
        "qkv_proj": [cfg.num_heads * cfg.head_dim] + [cfg.num_kv_heads * cfg.head_dim] * 2,
        "gate_up_proj": [cfg.intermediate_size] * 2,
    }
    loaded: set[str] = set()
    kept: dict[str, list[tuple[str, int, int | None, QuantizedWeight]]] = {}
    """Module name → its parts' (target, row offset, rows, blocks), stacked into the module once all are read."""
    for name, tensor in tensors:
        if "rotary_emb" in name or (cfg.tie_word_embeddings and name == "lm_head.weight"):
            continue
        target, offset, size = _target(name, shard_sizes)
        module, _, leaf = target.rpartition(".")
        blocks = _kept(tensor, quantization) if keeps and leaf == "weight" and module in quantizable else None
        if blocks is not None:
            kept.setdefault(module, []).append((target, offset, size, blocks))
        else:
            _copy(params, name, target, offset, size, tensor, cfg)
        loaded.add(_shard_key(target, params, offset, size))
    for module, parts in kept.items():
        parts.sort(key=lambda part: part[1])
        whole = len(parts) == len(shard_sizes.get(module.rpartition(".")[2], [0]))  # every part of q, k, v kept
        if whole and len({blocks.kind for *_, blocks in parts}) == 1:
            quantizable[module].keep_quantized(QuantizedWeight.stack([blocks for *_, blocks in parts]))
            continue
        logger.info(
            "%s: its parts are not all of one block type, so it is dequantized to %s (one matrix multiplies "
            "in one type)",
            module,
            dtype,
        )
        for target, offset, size, blocks in parts:
            _copy(params, target, target, offset, size, blocks, cfg)
    if cfg.tie_word_embeddings:
        embedding = model.model.embed_tokens
        if embedding.quantized is not None:
            model.lm_head.keep_quantized(embedding.quantized)
        else:
            embedding_t = embedding.weight.detach().t()
            model.lm_head.weight_t = torch.nn.Parameter(
                embedding_t.contiguous() if device.type == "cpu" else embedding_t, requires_grad=False
            )
    _check_complete(params, loaded, shard_sizes, cfg)
    if device.type == "cpu" and onednn_prepacks(dtype):
        for layer in model.modules():
            if isinstance(layer, Linear) and layer.quantized is None:
                layer.pack()
    return model.eval().requires_grad_(False)


def _kept(tensor: torch.Tensor | QuantizedWeight, quantization: str) -> QuantizedWeight | None:
    """The blocks `quantization` keeps for a projection's or the embedding's weight; None: it is stored as floats."""
    if quantization == QUANTIZATION_AUTO:
        return tensor if isinstance(tensor, QuantizedWeight) else None
    if isinstance(tensor, QuantizedWeight):
        return tensor if tensor.kind == QuantType.Q8_0 else quantize_q8_0(tensor.dequantize())
    return quantize_q8_0(tensor) if tensor.dim() == 2 and tensor.shape[1] % BLOCK_WEIGHTS == 0 else None


def _shard_key(target: str, params: dict[str, torch.nn.Parameter], offset: int, size: int | None) -> str:
    """The name `_check_complete` expects for a tensor loaded into `target` (its row offset where it is a shard)."""
    key = f"{target}_t" if f"{target}_t" in params else target
    return key if size is None else f"{key}#{offset}"


def _copy(
    params: dict[str, torch.nn.Parameter],
    name: str,
    target: str,
    offset: int,
    size: int | None,
    tensor: torch.Tensor | QuantizedWeight,
    cfg: ModelConfig,
) -> None:
    """Write `tensor` (dequantized, if blocks) into its parameter: transposed into a `weight_t`, into its shard."""
    transposed = f"{target}_t" in params
    key = f"{target}_t" if transposed else target
    if key not in params:
        raise ValueError(f"unexpected tensor {name!r} for {cfg.model_type}")
    values = tensor.dequantize() if isinstance(tensor, QuantizedWeight) else tensor
    dest = params[key].data
    if size is not None:
        dest = dest.narrow(1 if transposed else 0, offset, size)
    dest.copy_(values.t() if transposed else values)


def _target(name: str, shard_sizes: dict[str, list[int]]) -> tuple[str, int, int | None]:
    """Our parameter name, the row offset inside it and the row count (None: the whole tensor)."""
    parts = name.split(".")
    for i, part in enumerate(parts):
        if part in _PACKED:
            packed, shard = _PACKED[part]
            parts[i] = packed
            sizes = shard_sizes[packed]
            return ".".join(parts), sum(sizes[:shard]), sizes[shard]
    return name, 0, None


def _check_complete(
    params: dict[str, torch.nn.Parameter],
    loaded: set[str],
    shard_sizes: dict[str, list[int]],
    cfg: ModelConfig,
) -> None:
    expected = set()
    for name in params:
        if cfg.tie_word_embeddings and name == "lm_head.weight_t":
            continue
        packed = next((p for p in shard_sizes if f".{p}." in name), None)
        if packed is None:
            expected.add(name)
        else:
            sizes = shard_sizes[packed]
            expected.update(f"{name}#{sum(sizes[:i])}" for i in range(len(sizes)))
    missing = sorted(expected - loaded)
    if missing:
        raise ValueError(f"checkpoint lacks {len(missing)} tensors, first: {missing[:3]}")
