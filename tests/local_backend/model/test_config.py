"""config.json parsing across transformers 4.x and 5.x spellings and the Llama-architecture variants."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

from local_backend.model.config import ModelConfig
from local_backend.model.llama import rope_tables

BASE = dict(
    vocab_size=100,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=256,
)


@pytest.mark.parametrize(
    ("model_type", "extra", "expect"),
    [
        ("llama", {}, dict(qkv_bias=False, qk_norm=False, head_dim=16)),
        ("qwen2", {}, dict(qkv_bias=True, o_bias=False)),
        ("qwen3", {"head_dim": 32}, dict(qk_norm=True, head_dim=32)),
        ("mistral", {"sliding_window": 4096}, dict(sliding_window=4096)),
        ("qwen2", {"sliding_window": 4096, "use_sliding_window": False}, dict(sliding_window=None)),
        ("llama", {"attention_bias": True}, dict(qkv_bias=True, o_bias=True)),
        ("llama", {"eos_token_id": [1, 2]}, dict(eos_token_ids=(1, 2))),
    ],
)
def test_family_variants_map_to_layer_options(model_type, extra, expect):
    cfg = ModelConfig.from_dict({**BASE, "model_type": model_type, **extra})
    assert {k: getattr(cfg, k) for k in expect} == expect


def test_rope_theta_is_read_from_old_and_new_spellings():
    old = ModelConfig.from_dict({**BASE, "model_type": "llama", "rope_theta": 500000.0})
    new = ModelConfig.from_dict(
        {**BASE, "model_type": "llama", "rope_parameters": {"rope_theta": 500000.0, "rope_type": "default"}}
    )
    assert old.rope.theta == new.rope.theta == 500000.0


def test_llama31_rope_scaling_matches_transformers():
    scaling = {
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 32,
    }
    cfg = ModelConfig.from_dict({**BASE, "model_type": "llama", "rope_scaling": scaling, "rope_theta": 10000.0})
    hf = LlamaConfig(**BASE, rope_parameters={**scaling, "rope_theta": 10000.0})
    inv_freq, _ = ROPE_INIT_FUNCTIONS["llama3"](hf, torch.device("cpu"))
    cos, _ = rope_tables(cfg.rope, cfg.head_dim, 256, torch.device("cpu"), torch.float32)
    freqs = torch.outer(torch.arange(256, dtype=torch.float), inv_freq)
    torch.testing.assert_close(cos, torch.cat((freqs, freqs), -1).cos())


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"model_type": "gpt2"}, "model_type='gpt2'"),
        ({"model_type": "llama", "rope_scaling": {"rope_type": "yarn", "factor": 4.0}}, "rope_type='yarn'"),
        ({"model_type": "llama", "hidden_act": "gelu"}, "hidden_act='gelu'"),
        ({"model_type": "llama", "num_key_value_heads": 3}, "num_key_value_heads=3"),
    ],
)
def test_unsupported_configs_raise_a_value_error_naming_the_setting(raw, message):
    with pytest.raises(ValueError, match=message):
        ModelConfig.from_dict({**BASE, **raw})
