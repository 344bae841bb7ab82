"""End-to-end engine behaviour on tiny random checkpoints, checked against transformers."""

from __future__ import annotations

import random
import shutil
import threading
from pathlib import Path

import pytest
import safetensors.torch
import torch

import local_backend
from local_backend import Engine, SamplingParams
from local_backend.engine import engine as engine_module
from local_backend.model.loader import load_model

GREEDY = SamplingParams(max_tokens=24, temperature=0, ignore_eos=True)


def _prompts(engine: Engine, lengths: list[int], seed: int = 0) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(4, engine.config.vocab_size) for _ in range(n)] for n in lengths]


@pytest.mark.parametrize("kind", ["llama", "mistral", "qwen2", "qwen3"])
def test_greedy_batch_matches_transformers_token_for_token(make_engine, hf_greedy, kind):
    engine = make_engine(kind)
    prompts = _prompts(engine, [5, 17, 33, 48])
    outputs = engine.generate(prompts, GREEDY)
    for prompt, out in zip(prompts, outputs):
        assert list(out.token_ids) == hf_greedy(kind, prompt, GREEDY.max_tokens)
        assert out.finish_reason == "length"
        assert list(out.prompt_token_ids) == prompt


@pytest.mark.parametrize("kind", ["llama", "qwen2"])
def test_shared_prefix_is_served_from_cache_with_identical_output(make_engine, hf_greedy, kind):
    engine = make_engine(kind)
    [prefix] = _prompts(engine, [70], seed=1)
    first = prefix + [7, 8, 9]
    second = prefix + [10, 11]
    [cold] = engine.generate([first], GREEDY)
    [warm] = engine.generate([second], GREEDY)
    assert cold.cached_tokens == 0
    assert warm.cached_tokens == 64  # every full 16-token block of the shared 70 tokens
    assert list(warm.token_ids) == hf_greedy(kind, second, GREEDY.max_tokens)
    [again] = engine.generate([first], GREEDY)
    assert again.cached_tokens == 64 and again.token_ids == cold.token_ids
    assert engine.stats().prefix_cache_hit_tokens == 128


@pytest.mark.parametrize("kind", ["llama", "qwen2"])
def test_batch_that_runs_out_of_blocks_is_preempted_and_still_matches(make_engine, hf_greedy, kind):
    block_bytes = 16 * 2 * 2 * 2 * 16 * 4  # block_size × 2 × layers × kv_heads × head_dim × 4 bytes
    engine = make_engine(kind, kv_cache_memory=14 * block_bytes)
    prompts = _prompts(engine, [30, 41, 25, 38, 33, 20], seed=2)
    params = SamplingParams(max_tokens=40, temperature=0, ignore_eos=True)
    outputs = engine.generate(prompts, params)
    assert engine.stats().num_preemptions > 0
    for prompt, out in zip(prompts, outputs):
        assert list(out.token_ids) == hf_greedy(kind, prompt, params.max_tokens)
    assert engine.stats().blocks_used == 0


def test_chunked_prefill_under_a_small_token_budget_gives_the_same_tokens(make_engine, hf_greedy):
    engine = make_engine(max_num_batched_tokens=8, max_num_seqs=4)
    prompts = _prompts(engine, [45, 9, 30], seed=3)
    for prompt, out in zip(prompts, engine.generate(prompts, GREEDY)):
        assert list(out.token_ids) == hf_greedy("llama", prompt, GREEDY.max_tokens)


def test_kv_bytes_per_token_follows_the_formula_and_sizes_the_pool(make_engine):
    engine = make_engine(kv_cache_memory=100_000)
    cfg = engine.config
    assert engine.kv_bytes_per_token == 2 * cfg.num_layers * cfg.num_kv_heads * cfg.head_dim * 4
    stats = engine.stats()
    assert stats.kv_cache_bytes == stats.num_blocks * 16 * engine.kv_bytes_per_token <= 100_000
    cache = engine.runner.kv_cache
    assert cache.numel() * cache.element_size() == stats.kv_cache_bytes


def test_seeded_sampling_repeats_whatever_shares_the_batch(make_engine):
    engine = make_engine()
    prompt, *others = _prompts(engine, [12, 20, 7], seed=4)
    seeded = SamplingParams(max_tokens=16, temperature=1.0, top_p=0.9, seed=1234, ignore_eos=True)
    [alone] = engine.generate([prompt], seeded)
    batch = engine.generate(
        [prompt, *others], [seeded, SamplingParams(max_tokens=16), SamplingParams(max_tokens=9, seed=9)]
    )
    assert batch[0].token_ids == alone.token_ids
    [other_seed] = engine.generate([prompt], SamplingParams(max_tokens=16, seed=4321, ignore_eos=True))
    assert other_seed.token_ids != alone.token_ids


def test_max_tokens_ends_with_length_and_stop_token_with_stop(make_engine):
    engine = make_engine()
    [prompt] = _prompts(engine, [10], seed=5)
    [long] = engine.generate([prompt], SamplingParams(max_tokens=12, temperature=0, ignore_eos=True))
    assert (long.finish_reason, len(long.token_ids)) == ("length", 12)
    stop_id = long.token_ids[5]
    [stopped] = engine.generate([prompt], SamplingParams(max_tokens=12, temperature=0, stop_token_ids=(stop_id,)))
    assert stopped.finish_reason == "stop"
    assert stopped.token_ids == long.token_ids[: long.token_ids.index(stop_id) + 1]


def test_stop_string_ends_the_text_before_it(make_engine):
    engine = make_engine()
    prompt = "The quick brown fox"
    [free] = engine.generate([prompt], SamplingParams(max_tokens=30, temperature=0, ignore_eos=True))
    stop = free.text[8:10]
    [cut] = engine.generate([prompt], SamplingParams(max_tokens=30, temperature=0, stop=stop, ignore_eos=True))
    assert cut.finish_reason == "stop"
    assert cut.text == free.text[: free.text.find(stop)]


@pytest.mark.parametrize(
    ("prompt", "params", "message"),
    [
        ("", SamplingParams(), "empty"),
        ([], SamplingParams(), "empty"),
        ([5] * 256, SamplingParams(), "max_model_len"),
        ([5, 99_999], SamplingParams(), "unknown token ids"),
        ([5, -1], SamplingParams(), "unknown token ids"),
        ([5], SamplingParams(stop_token_ids=(99_999,)), "stop_token_ids"),
    ],
)
def test_bad_input_raises_value_error_and_the_engine_keeps_serving(make_engine, prompt, params, message):
    engine = make_engine()
    with pytest.raises(ValueError, match=message):
        engine.generate(["fine prompt", prompt], params)
    [out] = engine.generate(["fine prompt"], SamplingParams(max_tokens=3))
    assert len(out.token_ids) <= 3
    assert engine.stats().num_waiting == engine.stats().num_running == 0


@pytest.mark.parametrize(
    ("field", "value"),
    [("max_tokens", 0), ("temperature", -0.5), ("top_p", 0.0), ("seed", 2**64), ("seed", -(2**63) - 1)],
)
def test_bad_sampling_params_raise_value_error_naming_the_field(field, value):
    with pytest.raises(ValueError, match=f"{field}={value}"):
        SamplingParams(**{field: value})


def test_chat_prompt_renders_the_template_and_generates(make_engine):
    engine = make_engine()
    ids = engine.chat_prompt([{"role": "user", "content": "Hello world!"}])
    assert ids[0] == engine.tokenizer.bos_token_id and ids.count(engine.tokenizer.bos_token_id) == 1
    text = engine.tokenizer.decode(ids)
    assert text.endswith("user\nHello world!\nassistant\n")
    [out] = engine.generate([ids], SamplingParams(max_tokens=4))
    assert out.prompt_token_ids == tuple(ids)


def test_unsupported_checkpoint_files_are_named_in_the_error(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(FileNotFoundError, match=r"tokenizer.json, tokenizer_config.json, \*.safetensors"):
        Engine.from_pretrained(tmp_path)


def test_default_model_resolves_to_the_bundled_directory():
    bundled = Path(local_backend.__file__).parent / "models" / "default"
    with Engine.from_pretrained("default", device="cpu") as engine:
        assert engine.kv_bytes_per_token > 0
    assert (bundled / "config.json").exists()


def _make_looping(engine: Engine) -> None:
    """Rewire the model so greedy decoding cycles t → t+1 → t+2 → t inside each group of three ids.

    With attention and MLP outputs zeroed every layer is the identity, so the logits are
    lm_head · h_t where h_t is the normed embedding of the current token; lm_head row s (a column
    of `weight_t`) = h_{g(s)} with g the inverse cycle makes |h_t|² (the largest dot product) land
    on the next id of the cycle.
    """
    model = engine.runner.model
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight_t.zero_()
            layer.mlp.down_proj.weight_t.zero_()
        h = model.model.norm(model.model.embed_tokens.weight)
        ids = torch.arange(h.shape[0])
        inverse = (3 * (ids // 3) + (ids + 2) % 3).clamp(max=h.shape[0] - 1)
        model.lm_head.weight_t.copy_((h[inverse] * 3 / h.pow(2).sum(-1).mean()).t())


@pytest.mark.parametrize(
    "penalty",
    [{"repetition_penalty": 3.0}, {"frequency_penalty": 0.5}, {"presence_penalty": 2.0}, {"dry_multiplier": 1.0}],
)
def test_penalties_break_the_loop_of_a_looping_model(make_engine, penalty):
    engine = make_engine()
    _make_looping(engine)
    plain = SamplingParams(max_tokens=30, temperature=0, ignore_eos=True)
    [looping] = engine.generate([[30]], plain)
    assert looping.token_ids[:6] == (31, 32, 30, 31, 32, 30) and len(set(looping.token_ids)) == 3
    [penalised] = engine.generate([[30]], SamplingParams(max_tokens=30, temperature=0, ignore_eos=True, **penalty))
    assert len(set(penalised.token_ids)) > 3


def test_bfloat16_halves_the_kv_bytes_and_runs_every_sampler_path(make_engine):
    engine = make_engine("qwen2", dtype="bfloat16")
    assert engine.kv_bytes_per_token == make_engine("qwen2").kv_bytes_per_token // 2
    params = SamplingParams(
        max_tokens=8,
        temperature=0.7,
        seed=1,
        top_k=20,
        top_p=0.9,
        min_p=0.05,
        repetition_penalty=1.2,
        frequency_penalty=0.3,
        presence_penalty=0.3,
        dry_multiplier=0.5,
    )
    [out] = engine.generate(["Hello world"], params)
    assert len(out.token_ids) == 8 or out.finish_reason == "stop"


def test_max_model_len_beyond_the_model_limit_is_refused(llama_dir):
    with pytest.raises(ValueError, match="max_model_len=10000 exceeds the model's limit of 512"):
        Engine.from_pretrained(llama_dir, device="cpu", max_model_len=10_000)


def test_cache_salt_keeps_each_tenants_prefix_cache_apart_with_exact_write_counts(make_engine):
    engine = make_engine()
    [prompt] = _prompts(engine, [70], seed=3)
    [a_cold] = engine.generate([prompt], GREEDY, cache_salt="tenant-a")
    [a_warm] = engine.generate([prompt], GREEDY, cache_salt="tenant-a")
    [b_cold] = engine.generate([prompt], GREEDY, cache_salt="tenant-b")
    [unsalted] = engine.generate([prompt], GREEDY)
    assert (a_cold.cached_tokens, a_cold.cache_written_tokens) == (0, 64)
    assert (a_warm.cached_tokens, a_warm.cache_written_tokens) == (64, 0)
    assert (b_cold.cached_tokens, b_cold.cache_written_tokens) == (0, 64)
    assert unsalted.cached_tokens == 0
    assert a_cold.token_ids == a_warm.token_ids == b_cold.token_ids == unsalted.token_ids


def test_completion_names_the_stop_string_that_ended_it(make_engine):
    engine = make_engine()
    [free] = engine.generate(["The quick brown fox"], SamplingParams(max_tokens=30, temperature=0, ignore_eos=True))
    stop = free.text[8:10]
    params = SamplingParams(max_tokens=30, temperature=0, stop=("never-seen", stop), ignore_eos=True)
    [cut] = engine.generate(["The quick brown fox"], params)
    assert cut.stop_string == stop and free.stop_string is None


def test_stats_report_the_batch_limit(make_engine):
    assert make_engine(max_num_seqs=3).stats().max_num_seqs == 3


def test_a_top_k_beyond_the_vocabulary_filters_nothing_and_extreme_seeds_work(make_engine):
    engine = make_engine()
    sampled = [SamplingParams(max_tokens=3, top_k=2**64, seed=seed) for seed in (2**64 - 1, -(2**63))]
    outputs = engine.generate(["Hello", "Hello"], sampled)  # neither fails the batch's step
    assert all(out.finish_reason in ("stop", "length") for out in outputs)


def test_a_block_is_named_by_its_whole_prefix_not_by_its_own_tokens(make_engine, hf_greedy):
    engine = make_engine()
    a, z, b = _prompts(engine, [16, 16, 16], seed=6)
    [first] = engine.generate([a + z + z + b + [7]], GREEDY)
    [second] = engine.generate([a + b + [7]], GREEDY)  # b's block follows a here, not a+z+z
    assert first.cached_tokens == 0
    assert second.cached_tokens == 16
    assert list(second.token_ids) == hf_greedy("llama", a + b + [7], GREEDY.max_tokens)


def test_preemption_in_the_middle_of_a_chunked_prefill_still_matches(make_engine, hf_greedy, monkeypatch):
    block_bytes = 16 * 2 * 2 * 2 * 16 * 4
    engine = make_engine(kv_cache_memory=9 * block_bytes, max_num_batched_tokens=8, max_num_seqs=4)
    mid_prefill = []
    preempt = engine.scheduler._preempt

    def observed(seq):
        mid_prefill.append(0 < seq.num_computed_tokens < seq.num_prompt_tokens)
        preempt(seq)

    monkeypatch.setattr(engine.scheduler, "_preempt", observed)
    prompts = _prompts(engine, [20, 70, 30], seed=7)
    params = SamplingParams(max_tokens=40, temperature=0, ignore_eos=True)
    outputs = engine.generate(prompts, params)
    assert any(mid_prefill)
    for prompt, out in zip(prompts, outputs):
        assert list(out.token_ids) == hf_greedy("llama", prompt, params.max_tokens)
    [again] = engine.generate([prompts[1]], params)
    assert again.token_ids == outputs[1].token_ids and again.cached_tokens == 64


def test_the_pool_holds_no_more_blocks_than_a_full_batch_can_use(make_engine):
    engine = make_engine(kv_cache_memory=2**30, max_num_seqs=2, max_model_len=100)
    stats = engine.stats()
    assert stats.num_blocks == 2 * 7  # max_num_seqs × ⌈100 / 16⌉, not the 2**30 bytes' 131072
    assert len(engine.block_manager.blocks) == stats.num_blocks
    outputs = engine.generate([[5] * 90, [6] * 90], SamplingParams(max_tokens=10, temperature=0, ignore_eos=True))
    assert [len(o.token_ids) for o in outputs] == [10, 10] and engine.stats().num_preemptions == 0


def test_the_model_loads_on_a_thread_that_ends_and_its_errors_surface_as_themselves(
    make_engine, llama_dir, tmp_path, monkeypatch
):
    loaders: list[threading.Thread] = []

    def recorded(*args, **kwargs):
        loaders.append(threading.current_thread())
        if len(loaders) == 2:
            raise ValueError("a tensor that does not load")
        return load_model(*args, **kwargs)

    monkeypatch.setattr(engine_module, "load_model", recorded)
    engine = make_engine()
    [loader] = loaders
    assert loader is not threading.current_thread() and not loader.is_alive()  # its OpenMP pool ended with it
    assert engine.generate([[5, 6, 7]], SamplingParams(max_tokens=4, temperature=0, ignore_eos=True))[0].token_ids
    broken = tmp_path / "broken"
    shutil.copytree(llama_dir, broken)
    tensors = safetensors.torch.load_file(broken / "model.safetensors")
    tensors["model.layers.0.mlp.extra.weight"] = torch.zeros(2, 2)
    safetensors.torch.save_file(tensors, broken / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ValueError, match="unexpected tensor 'model.layers.0.mlp.extra.weight'"):
        Engine.from_pretrained(broken, device="cpu", max_model_len=256, kv_cache_memory=2**20)
    assert len(loaders) == 1  # refused from the file's header, before any tensor is loaded
    with pytest.raises(ValueError, match="a tensor that does not load"):
        Engine.from_pretrained(llama_dir, device="cpu", max_model_len=256, kv_cache_memory=2**20)
    assert len(loaders) == 2 and not loaders[1].is_alive()
