"""Model configuration read from a Hugging Face `config.json` (Llama architecture only)."""

from __future__ import annotations

import json
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
            raise ValueError(
                f"rope_type={self.rope_type!r} is not supported; supported: {SUPPORTED_ROPE_TYPES}"
            )
        if self.theta <= 0:
            raise ValueError(f"rope theta must be > 0, got {self.theta}")


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
            raise ValueError(
                f"model_type={self.model_type!r} is not supported; supported: {SUPPORTED_MODEL_TYPES}"
            )
        if self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"num_attention_heads={self.num_heads} is not a multiple of "
                f"num_key_value_heads={self.num_kv_heads}"
            )

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> ModelConfig:
        """Read the keys of transformers 4.x and 5.x configs (`rope_scaling` or `rope_parameters`)."""
        model_type = raw.get("model_type", "")
        if raw.get("hidden_act", "silu") != "silu":
            raise ValueError(f"hidden_act={raw['hidden_act']!r} is not supported; only 'silu'")
        heads = raw["num_attention_heads"]
        window = raw.get("sliding_window") if raw.get("use_sliding_window", True) else None
        return cls(
            model_type=model_type,
            vocab_size=raw["vocab_size"],
            hidden_size=raw["hidden_size"],
            intermediate_size=raw["intermediate_size"],
            num_layers=raw["num_hidden_layers"],
            num_heads=heads,
            num_kv_heads=raw.get("num_key_value_heads") or heads,
            head_dim=raw.get("head_dim") or raw["hidden_size"] // heads,
            rms_norm_eps=raw.get("rms_norm_eps", 1e-6),
            rope=_rope_config(raw),
            max_position_embeddings=raw.get("max_position_embeddings", 4096),
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
        """Load `config.json` and add the EOS ids of `generation_config.json` beside it, if any."""
        raw = json.loads(path.read_text())
        generation = path.with_name("generation_config.json")
        if generation.exists():
            extra = _as_ids(json.loads(generation.read_text()).get("eos_token_id"))
            own = _as_ids(raw.get("eos_token_id"))
            raw["eos_token_id"] = list(own) + [i for i in extra if i not in own]
        return cls.from_dict(raw)


def _as_ids(value: int | list[int] | None) -> tuple[int, ...]:
    if value is None:
        return ()
    return (value,) if isinstance(value, int) else tuple(value)


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
