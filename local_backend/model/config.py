"""Model configuration read from a Hugging Face `config.json` (Llama architecture only)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SUPPORTED_MODEL_TYPES = ("llama", "mistral", "qwen2", "qwen3")
"""`model_type` values whose checkpoints share the Llama layer layout (SmolLM is `llama`)."""

SUPPORTED_ROPE_TYPES = ("default", "llama3", "linear")


@dataclass(frozen=True, slots=True)
class RopeConfig:
    """Rotary embedding parameters; `rope_type="llama3"` is Llama 3.1's frequency-band rescaling."""

    theta: float
    rope_type: str = "default"
    factor: float = 1.0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_position_embeddings: int = 8192

    def __post_init__(self) -> None:
        if self.rope_type not in SUPPORTED_ROPE_TYPES:
            raise ValueError(f"rope_type={self.rope_type!r} is not supported; supported: {SUPPORTED_ROPE_TYPES}")
        if not (isinstance(self.theta, (int, float)) and 0 < self.theta < math.inf):
            raise ValueError(f"rope theta must be a finite number > 0, got {self.theta!r}")
        if not (isinstance(self.factor, (int, float)) and 0 < self.factor < math.inf):
            raise ValueError(f"rope scaling factor must be a finite number > 0, got {self.factor!r}")


@dataclass(frozen=True, slots=True)
class ModelConfig:
    """The shape of a Llama-family decoder; everything the model and the KV cache need."""

    model_type: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float
    rope: RopeConfig
    max_position_embeddings: int
    tie_word_embeddings: bool = False
    qkv_bias: bool = False
    o_bias: bool = False
    mlp_bias: bool = False
    qk_norm: bool = False
    eos_token_ids: tuple[int, ...] = ()
    sliding_window: int | None = None

    def __post_init__(self) -> None:
        if self.model_type not in SUPPORTED_MODEL_TYPES:
            raise ValueError(f"model_type={self.model_type!r} is not supported; supported: {SUPPORTED_MODEL_TYPES}")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"num_attention_heads={self.num_heads} is not a multiple of num_key_value_heads={self.num_kv_heads}"
            )

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> ModelConfig:
        """Read the keys of transformers 4.x and 5.x configs (`rope_scaling` or `rope_parameters`)."""
        model_type = raw.get("model_type", "")
        if raw.get("hidden_act", "silu") != "silu":
            raise ValueError(f"hidden_act={raw['hidden_act']!r} is not supported; only 'silu'")
        hidden, heads = _count(raw, "hidden_size"), _count(raw, "num_attention_heads")
        head_dim = _count(raw, "head_dim", hidden // heads)
        if head_dim % 2:
            raise ValueError(f"head_dim={head_dim} is odd; rotary embeddings rotate pairs of dimensions")
        window = raw.get("sliding_window") if raw.get("use_sliding_window", True) else None
        eps = raw.get("rms_norm_eps", 1e-6)
        if not (type(eps) in (int, float) and 0 < eps < math.inf):
            raise ValueError(f"rms_norm_eps={eps!r} is not a finite number > 0")
        return cls(
            model_type=model_type,
            vocab_size=_count(raw, "vocab_size"),
            hidden_size=hidden,
            intermediate_size=_count(raw, "intermediate_size"),
            num_layers=_count(raw, "num_hidden_layers"),
            num_heads=heads,
            num_kv_heads=_count(raw, "num_key_value_heads", heads),
            head_dim=head_dim,
            rms_norm_eps=eps,
            rope=_rope_config(raw),
            max_position_embeddings=_count(raw, "max_position_embeddings", 4096),
            tie_word_embeddings=raw.get("tie_word_embeddings", False),
            qkv_bias=model_type == "qwen2" or raw.get("attention_bias", False),
            o_bias=model_type != "qwen2" and raw.get("attention_bias", False),
            mlp_bias=raw.get("mlp_bias", False),
            qk_norm=model_type == "qwen3",
            eos_token_ids=_as_ids(raw.get("eos_token_id")),
            sliding_window=window,
        )

    @classmethod
    def from_file(cls, path: Path) -> ModelConfig:
        """Load `config.json` and add the EOS ids of `generation_config.json` beside it, if any; a `ValueError`
        names the file and the key it cannot use."""
        try:
            raw = _json_object(path)
            generation = path.with_name("generation_config.json")
            if generation.exists():
                extra = _as_ids(_json_object(generation).get("eos_token_id"))
                own = _as_ids(raw.get("eos_token_id"))
                raw["eos_token_id"] = list(own) + [i for i in extra if i not in own]
            return cls.from_dict(raw)
        except ValueError as exc:
            raise ValueError(f"{path}: {exc}") from None


def _json_object(path: Path) -> dict[str, Any]:
    raw = json.loads(path.read_bytes())
    if not isinstance(raw, dict):
        raise ValueError(f"{path.name} holds a JSON {type(raw).__name__}, not an object")
    return raw


def _count(raw: dict[str, Any], key: str, default: int | None = None) -> int:
    """`raw[key]`, a positive integer (`default` where absent or null); a `ValueError` naming the key otherwise."""
    value = raw.get(key)
    if value is None and default is not None:
        return default
    if type(value) is not int or value < 1:
        raise ValueError(f"{key}={value!r} is not a positive integer" if key in raw else f"{key} is missing")
    return value


def _as_ids(value: Any) -> tuple[int, ...]:
    """`eos_token_id` as a tuple: absent, one id or a list of ids."""
    ids = () if value is None else (value,) if isinstance(value, int) else value
    if not isinstance(ids, (tuple, list)) or not all(type(i) is int and i >= 0 for i in ids):
        raise ValueError(f"eos_token_id={value!r} is not a token id or a list of them")
    return tuple(ids)


def _rope_config(raw: dict[str, Any]) -> RopeConfig:
    params: dict[str, Any] = dict(raw.get("rope_parameters") or {})
    params.update(raw.get("rope_scaling") or {})
    rope_type = params.get("rope_type", params.get("type", "default"))
    return RopeConfig(
        theta=params.get("rope_theta", raw.get("rope_theta", 10000.0)),
        rope_type=rope_type,
        factor=params.get("factor", 1.0),
        low_freq_factor=params.get("low_freq_factor", 1.0),
        high_freq_factor=params.get("high_freq_factor", 4.0),
        original_max_position_embeddings=params.get(
            "original_max_position_embeddings", raw.get("max_position_embeddings", 8192)
        ),
    )
