"""N-gram speculative decoding: the same tokens (greedy) or the same distribution (sampled) as without it.

Besides the tiny random checkpoints, two derived from the Llama one copy what came before: with its
attention and MLP outputs scaled to 0 the next token depends on the current one only (greedy output
falls into a cycle the n-gram lookup predicts: nearly every draft is kept), and scaled to 0.02 the
context still steers it (some drafts kept, some refused, the kept ones' KV read by later steps).
"""

from __future__ import annotations

import json
import math
import shutil
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import httpx2
import pytest
import safetensors.torch
import torch
from prometheus_client.parser import text_string_to_metric_families

from local_backend import Engine, SamplingParams
from local_backend.__main__ import engine_config, main, parse_args
from local_backend.engine.engine_config import ConfigError, EngineConfig
from local_backend.engine.sequence import Sequence
from local_backend.engine.speculative import NgramProposer, SpeculativeConfig, continuation
from local_backend.kernels import ops
from local_backend.sampling.sampler import Sampler
from tests.local_backend.sampling.test_sampler import NO_BREAKERS, cpu_ops

SPEC = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 3, "prompt_lookup_min": 1}
GREEDY = SamplingParams(max_tokens=40, temperature=0, ignore_eos=True)
CHI_SQUARE_Z = 3.09
"""The standard normal quantile of p = 0.001: a distribution test fails by chance once in a thousand seeds."""

Make = Callable[..., Engine]


def _scaled(source: Path, target: Path, scale: float) -> Path:
    """A copy of `source` with every attention and MLP output projection scaled by `scale`."""
    shutil.copytree(source, target)
    for path in target.glob("*.safetensors"):
        weights = safetensors.torch.load_file(path)
        for name in weights:
            if name.endswith(("o_proj.weight", "down_proj.weight")):
                weights[name] = weights[name] * scale
        safetensors.torch.save_file(weights, path, metadata={"format": "pt"})
    return target


@pytest.fixture(scope="module")
def copying(checkpoints: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("copying")
    return {
        "bigram": _scaled(checkpoints["llama"], root / "bigram", 0.0),
        "steered": _scaled(checkpoints["llama"], root / "steered", 0.02),
    }


@pytest.fixture
def make() -> Iterator[Make]:
    """`make(checkpoint, speculate, **options)`: a fresh CPU engine, closed after the test."""
    engines: list[Engine] = []

    def build(checkpoint: Path, speculate: bool, **options: object) -> Engine:
        settings: dict[str, object] = {"dtype": "float32", "max_model_len": 256, "kv_cache_memory": 2**20, **options}
        if speculate:
            settings["speculative_config"] = SPEC
        engine = Engine.from_pretrained(checkpoint, device="cpu", **settings)
        engines.append(engine)
        return engine

    yield build
    for engine in engines:
        engine.close()


def _cycle_prompt(engine: Engine, length: int = 24) -> list[int]:
    """A prompt the model continues by copying: its own greedy output after one token."""
    [out] = engine.generate([[5]], SamplingParams(max_tokens=length, temperature=0, ignore_eos=True))
    return [5, *out.token_ids]


# --- config and proposer -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ({"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 3}, SpeculativeConfig(4, 3, 3)),
        ({"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_min": 2}, SpeculativeConfig(2, 2, 2)),
        (
            '{"method": "ngram", "num_speculative_tokens": 5, "prompt_lookup_max": 4, "prompt_lookup_min": 1}',
            SpeculativeConfig(5, 4, 1),
        ),
    ],
)
def test_speculative_config_reads_vllms_spelling(given, expected):
    config = EngineConfig(speculative_config=given)
    assert config.speculative_config == expected
    assert SpeculativeConfig.parse(expected.to_json()) == expected
    assert config.serve_arguments() == ["--speculative-config", expected.to_json()]


@pytest.mark.parametrize(
    ("given", "complaint"),
    [
        ({"method": "eagle", "num_speculative_tokens": 4, "prompt_lookup_max": 3}, "method='eagle' is not supported"),
        ({"method": "ngram", "prompt_lookup_max": 3}, "num_speculative_tokens must be given"),
        ({"method": "ngram", "num_speculative_tokens": 4}, "prompt_lookup_max (or prompt_lookup_min) must be given"),
        (
            {"method": "ngram", "num_speculative_tokens": 0, "prompt_lookup_max": 3},
            "num_speculative_tokens=0 must be >= 1",
        ),
        (
            {"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_max": 2, "prompt_lookup_min": 3},
            "prompt_lookup_max=2 must be >= prompt_lookup_min (3)",
        ),
        (
            {"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_max": 2, "model": "x"},
            "does not take: model",
        ),
        ("[1, 2]", "must be a JSON object"),
    ],
)
def test_a_speculative_config_that_cannot_work_is_refused_naming_the_option(given, complaint):
    with pytest.raises(ConfigError) as refused:
        EngineConfig(speculative_config=given)
    assert refused.value.option == "--speculative-config" and complaint in str(refused.value)


def test_serve_exits_2_naming_the_option_for_a_method_it_does_not_have(llama_dir, capsys):
    eagle = json.dumps({"method": "eagle", "num_speculative_tokens": 2})
    status = main(["serve", "--model", str(llama_dir), "--device", "cpu", "--speculative-config", eagle])
    err = capsys.readouterr().err
    assert status == 2 and "--speculative-config" in err and "'ngram' only" in err


def test_serve_reads_the_option_into_the_engine_config(llama_dir):
    args = parse_args(["serve", "--model", str(llama_dir), "--speculative-config", json.dumps(SPEC)])
    assert engine_config(args).speculative_config == SpeculativeConfig(4, 3, 1)
    assert engine_config(parse_args(["serve"])).speculative_config is None


@pytest.mark.parametrize(
    ("tokens", "lookup", "count", "expected"),
    [
        ([1, 2, 3, 9, 1, 2, 3, 8, 5, 2, 3], (1, 3), 2, (8, 5)),  # the most recent earlier "2 3" is followed by 8
        ([4, 2, 3, 7, 1, 2, 3, 8, 5, 1, 2, 3], (1, 3), 3, (8, 5, 1)),  # the longest n first: "1 2 3"
        ([1, 2, 3, 4, 5, 6], (1, 2), 3, ()),  # no earlier occurrence
        ([7, 7, 7, 7], (1, 2), 5, (7,) * 5),  # one token back: the copy overlaps what it produces
        ([1, 2, 3, 1, 2, 3, 1], (2, 2), 5, (2, 3, 1, 2, 3)),  # "3 1" three back: period 3 goes on
        ([1, 2, 9, 1, 2], (3, 3), 2, ()),  # shorter than prompt_lookup_min matches nothing
        ([256, 1, 0, 0, 1], (1, 1), 2, (0, 0)),  # a byte match across token boundaries is not a match
    ],
)
def test_the_proposer_continues_the_most_recent_earlier_occurrence_of_the_last_ngram(tokens, lookup, count, expected):
    assert continuation(tokens, *lookup, count) == expected


def test_drafts_never_run_past_max_tokens_or_max_model_len_and_skip_logits_processors():
    proposer = NgramProposer(SpeculativeConfig(8, 2, 1), max_model_len=20)
    cycle = [1, 2, 3, 4] * 3

    def seq(max_tokens: int, prompt: list[int] = cycle, **params: object) -> Sequence:
        s = Sequence("s", prompt, SamplingParams(max_tokens=max_tokens, **params))
        s.append_token(1)  # one output token so far
        return s

    assert proposer.propose(seq(100), budget=100) == (2, 3, 4, 1, 2, 3)  # 13 tokens + 6 + 1 = max_model_len
    assert proposer.propose(seq(4), budget=100) == (2, 3)  # 1 + 2 drafts + the token after them = 4
    assert proposer.propose(seq(100), budget=2) == (2, 3)
    assert proposer.propose(seq(100, cycle + [1, 2, 3, 4]), budget=100) == (2, 3)  # 17 tokens, at most 20
    assert NgramProposer(SpeculativeConfig(3, 2, 1), 99).propose(seq(100), budget=100) == (2, 3, 4)
    assert proposer.propose(seq(100, logits_processor=lambda ids, row: row), budget=100) == ()


# --- the rejection rule ----------------------------------------------------------------------------


def _chi_square_limit(df: int) -> float:
    """The p = 0.001 quantile of chi-square with `df` degrees of freedom (Wilson-Hilferty)."""
    return df * (1 - 2 / (9 * df) + CHI_SQUARE_Z * math.sqrt(2 / (9 * df))) ** 3


def _fits(observed: Counter[int], expected: dict[int, float]) -> tuple[float, float]:
    """(statistic, limit) of chi-square goodness of fit; cells expected under 5 are pooled."""
    total = sum(observed.values())
    big = [t for t, p in expected.items() if p * total >= 5]
    cells = [(observed[t], expected[t] * total) for t in big]
    rest = total - sum(o for o, _ in cells), total * (1 - sum(expected[t] for t in big))
    if rest[1] >= 5:
        cells.append(rest)
    stat = sum((o - e) ** 2 / e for o, e in cells)
    return stat, _chi_square_limit(len(cells) - 1)


def _alike(a: Iterable[int], b: Iterable[int]) -> tuple[float, float]:
    """(statistic, limit) of the two-sample chi-square test that `a` and `b` share a distribution."""
    ca, cb = Counter(a), Counter(b)
    na, nb = sum(ca.values()), sum(cb.values())
    cells = [(ca[t], cb[t]) for t in ca | cb if ca[t] + cb[t] >= 10]
    cells.append((na - sum(x for x, _ in cells), nb - sum(y for _, y in cells)))
    cells = [(x, y) for x, y in cells if x + y > 0]
    ka, kb = math.sqrt(nb / na), math.sqrt(na / nb)
    stat = sum((ka * x - kb * y) ** 2 / (x + y) for x, y in cells)
    return stat, _chi_square_limit(len(cells) - 1)


def _target(row: torch.Tensor, params: SamplingParams) -> dict[int, float]:
    """The distribution plain sampling draws from: softmax(row / T), cut by top-k then top-p, renormalised."""
    probs = torch.softmax(row.double() / params.temperature, dim=-1)
    order = probs.argsort(descending=True)[: params.top_k or len(row)]
    kept = probs[order] / probs[order].sum()
    order = order[(kept.cumsum(0) - kept) < params.top_p]
    return dict(zip(order.tolist(), (probs[order] / probs[order].sum()).tolist()))


@pytest.mark.parametrize(
    "params",
    [
        SamplingParams(temperature=0.8),
        SamplingParams(temperature=1.0, top_k=6, top_p=0.9),
    ],
)
def test_verified_tokens_follow_the_distribution_plain_sampling_draws(params):
    torch.manual_seed(0)
    vocab, n = 50, 6000
    logits = torch.randn(2, vocab) * 2
    draft = int(logits[0].topk(2).indices[1])  # the second most likely: kept often, refused often
    seqs = [Sequence(f"s{i}", [1, 2, 3], params) for i in range(n)]
    sampler = Sampler(vocab, lambda _: NO_BREAKERS, cpu_ops())
    out = sampler.verify(logits.repeat(n, 1), seqs, [(draft,)] * n)

    first = Counter(tokens[0] for tokens in out)
    stat, limit = _fits(first, _target(logits[0], params))
    assert stat < limit
    second = Counter(tokens[1] for tokens in out if len(tokens) == 2)
    assert 0.1 * n < first[draft] < 0.9 * n  # both branches taken
    stat, limit = _fits(second, _target(logits[1], params))
    assert stat < limit


def test_a_verification_row_is_penalised_for_the_drafts_before_it():
    vocab = 8
    logits = torch.zeros(2, vocab)
    logits[:, 3], logits[1, 5] = 4.0, 3.8  # row 1 prefers 3 by 0.2, unless 3 was drafted before it
    sampler = Sampler(vocab, lambda _: NO_BREAKERS, cpu_ops())
    plain, penalised = (
        Sequence(n, [1, 2], SamplingParams(temperature=0, presence_penalty=p))
        for n, p in (("plain", 0.0), ("penalised", 0.5))
    )
    assert sampler.verify(logits.clone(), [plain], [(3,)]) == [[3, 3]]
    assert sampler.verify(logits.clone(), [penalised], [(3,)]) == [[3, 5]]
    assert sampler.verify(logits.clone(), [penalised], [(4,)]) == [[3]]  # refused at once: the argmax replaces it


# --- the engine ------------------------------------------------------------------------------------


def _same(plain: Engine, fast: Engine, prompts: list, params: SamplingParams | list[SamplingParams]) -> list:
    """Both engines' completions, asserted equal token for token (text and finish reason too)."""
    want, got = plain.generate(prompts, params), fast.generate(prompts, params)
    for a, b in zip(want, got):
        assert (b.token_ids, b.text, b.finish_reason, b.stop_string) == (
            a.token_ids,
            a.text,
            a.finish_reason,
            a.stop_string,
        )
        assert a.draft_tokens == 0 and b.accepted_draft_tokens <= b.draft_tokens
    return got


@pytest.mark.parametrize("kind", ["llama", "mistral", "qwen2", "qwen3"])
def test_greedy_with_speculation_matches_transformers_token_for_token(make, checkpoints, hf_greedy, kind):
    engine = make(checkpoints[kind], True)
    prompts = [[5, 6, 7, 8, 5, 6, 7, 8, 5, 6], [9, 10, 11, 12, 13, 9, 10, 11, 12, 13, 9, 10]]
    for prompt, out in zip(prompts, engine.generate(prompts, GREEDY)):
        assert list(out.token_ids) == hf_greedy(kind, prompt, GREEDY.max_tokens)
        assert out.draft_tokens > 0


@pytest.mark.parametrize("model", ["bigram", "steered"])
def test_copying_models_accept_drafts_and_match_transformers(make, copying, model):
    import transformers

    engine = make(copying[model], True)
    reference = transformers.AutoModelForCausalLM.from_pretrained(copying[model]).eval()
    prompt = _cycle_prompt(engine)
    [out] = engine.generate([prompt], GREEDY)
    want = reference.generate(
        torch.tensor([prompt]),
        max_new_tokens=GREEDY.max_tokens,
        do_sample=False,
        min_new_tokens=GREEDY.max_tokens,
        eos_token_id=None,
        pad_token_id=0,
    )
    assert list(out.token_ids) == want[0, len(prompt) :].tolist()
    assert out.accepted_draft_tokens > 0
    if model == "steered":
        assert out.accepted_draft_tokens < out.draft_tokens  # refusals too: the context steers it


def test_a_batch_mixing_speculating_decodes_plain_decodes_and_prefill_chunks_gives_the_same_tokens(
    make, copying, monkeypatch
):
    options = dict(max_num_seqs=6, max_num_batched_tokens=24, block_size=4)  # long prompts prefill in chunks
    plain, fast = make(copying["steered"], False, **options), make(copying["steered"], True, **options)
    run, kinds = fast.runner.run, []

    def recording(batch):  # what each step held: speculating decodes, plain decodes, prefill chunks
        drafts = [bool(d) for d in batch.draft_token_ids]
        plain_decodes = [n == 1 for n in batch.num_new_tokens]
        kinds.append(
            (any(drafts), any(plain_decodes), any(not d and n > 1 for d, n in zip(drafts, batch.num_new_tokens)))
        )
        return run(batch)

    monkeypatch.setattr(fast.runner, "run", recording)
    cycle = _cycle_prompt(plain, 30)
    recorder = SamplingParams(max_tokens=30, temperature=0, ignore_eos=True, logits_processor=lambda ids, row: row)
    prompts = [cycle, cycle[:13], [7] * 40 + cycle[:9], cycle[3:], list(range(4, 60)), cycle]
    params = [
        GREEDY,
        SamplingParams(max_tokens=7, temperature=0, ignore_eos=True),
        GREEDY,
        recorder,
        SamplingParams(max_tokens=23, temperature=0, ignore_eos=True),
        SamplingParams(max_tokens=40, temperature=0, ignore_eos=True, frequency_penalty=0.3, dry_multiplier=0.8),
    ]
    got = _same(plain, fast, prompts, params)
    assert [len(out.token_ids) for out in got] == [40, 7, 40, 30, 23, 40]
    assert got[0].accepted_draft_tokens > 0 and got[3].draft_tokens == 0  # a logits processor never speculates
    assert (True, True, True) in kinds  # all three in one step
    again = _same(plain, fast, prompts[:3], params[:3])  # now from the prefix cache
    assert all(out.cached_tokens > 0 for out in again)


def test_the_torch_ops_verify_as_the_native_ones_do(make, copying, monkeypatch):
    """The portable forms (CUDA's): a verification chunk's attention takes SDPA's masked path."""
    monkeypatch.setattr(ops, "select", lambda *_: ops.TORCH)
    plain, fast = make(copying["steered"], False), make(copying["steered"], True)
    assert fast.runner.sampler.ops is ops.TORCH and not fast.runner.paged_decodes
    prompt = _cycle_prompt(plain)
    [out] = _same(plain, fast, [prompt, list(range(4, 40))], GREEDY)[:1]
    assert out.accepted_draft_tokens > 0


def test_bfloat16_weights_verify_drafts_to_plain_bfloat16_s_tokens(make, copying):
    """n-gram speculation on bfloat16 weights: drafts accepted, the tokens plain bfloat16 decoding gives."""
    plain, fast = make(copying["steered"], False, dtype="bfloat16"), make(copying["steered"], True, dtype="bfloat16")
    prompt = _cycle_prompt(plain)
    [out] = _same(plain, fast, [prompt, list(range(4, 40))], GREEDY)[:1]
    assert out.accepted_draft_tokens > 0


def test_a_stop_string_or_token_inside_an_accepted_run_ends_the_output_there(make, copying):
    plain, fast = make(copying["bigram"], False), make(copying["bigram"], True)
    prompt = _cycle_prompt(plain)
    [free] = plain.generate([prompt], GREEDY)
    stop_text = plain.tokenizer.decode(list(free.token_ids[17:19]))
    stopped = SamplingParams(max_tokens=40, temperature=0, ignore_eos=True, stop=(stop_text,))
    by_token = SamplingParams(max_tokens=40, temperature=0, ignore_eos=True, stop_token_ids=(free.token_ids[18],))
    [at_string, at_token] = _same(plain, fast, [prompt, prompt], [stopped, by_token])
    assert at_string.finish_reason == at_token.finish_reason == "stop"
    assert len(at_string.token_ids) < 40 and at_token.token_ids[-1] == free.token_ids[18]
    assert at_token.accepted_draft_tokens > 0


def test_refused_drafts_are_never_named_in_the_prefix_cache_and_their_blocks_are_freed(make, copying):
    engine = make(copying["steered"], True, block_size=4)
    bm = engine.block_manager
    prompts = [_cycle_prompt(engine, 20), list(range(30, 50))]
    requests = [engine._submit(p, GREEDY, lambda delta: None, None, None) for p in prompts]
    while any(not r.is_finished for r in requests):
        engine.step()
        for seq in engine.scheduler.running:  # blocks for its tokens, and none held by refused drafts
            assert len(seq.block_table) in (-(-(len(seq) - 1) // 4), -(-len(seq) // 4))
    sequences = [r.seq.token_ids for r in requests]
    assert sum(r.seq.num_draft_tokens - r.seq.num_accepted_tokens for r in requests) > 0
    real = {tuple(tokens[i : i + 4]) for tokens in sequences for i in range(0, len(tokens) - 3, 4)}
    named = [block.token_ids for block in bm.blocks if block.hash is not None]
    assert named and all(tokens in real for tokens in named)
    assert engine.stats().blocks_used == 0


def test_sampled_tokens_are_distributed_as_without_speculation(make, copying):
    torch.manual_seed(0)
    options = dict(max_num_seqs=64, max_num_batched_tokens=512)
    plain, fast = make(copying["bigram"], False, **options), make(copying["bigram"], True, **options)
    prompt = _cycle_prompt(plain, 20)
    params = SamplingParams(max_tokens=4, temperature=0.4, ignore_eos=True)
    n = 1200
    want, got = plain.generate([prompt] * n, params), fast.generate([prompt] * n, params)
    assert sum(out.accepted_draft_tokens for out in got) > n // 4  # drafts kept and refused, many of each
    assert sum(out.draft_tokens - out.accepted_draft_tokens for out in got) > n // 4
    for position in (1, 2, 3):
        stat, limit = _alike((o.token_ids[position] for o in want), (o.token_ids[position] for o in got))
        assert stat < limit, f"position {position}"
    pairs = _alike((hash(o.token_ids[1:3]) for o in want), (hash(o.token_ids[1:3]) for o in got))
    assert pairs[0] < pairs[1]


def test_acceptance_counts_show_in_timings_and_metrics(serve, copying):
    served = serve(copying["bigram"], max_model_len=256, kv_cache_memory=2**20, speculative_config=SPEC)
    prompt = _cycle_prompt(served.engine)
    body = {"model": "tiny", "prompt": prompt, "max_tokens": 40, "temperature": 0, "ignore_eos": True}
    response = httpx2.post(f"{served.url}/v1/completions", json=body, timeout=60)
    timings = response.json()["timings"]
    assert timings["draft_n"] >= timings["draft_n_accepted"] > 0
    assert timings["draft_acceptance_rate"] == timings["draft_n_accepted"] / timings["draft_n"]
    assert response.json()["usage"]["completion_tokens"] == 40
    scraped = httpx2.get(f"{served.url}/metrics", timeout=60).text
    metrics = {s.name: s.value for family in text_string_to_metric_families(scraped) for s in family.samples}
    assert metrics["kvwise_spec_decode_num_accepted_tokens_total"] >= timings["draft_n_accepted"]
    assert metrics["kvwise_spec_decode_num_draft_tokens_total"] >= timings["draft_n"]
    assert metrics["kvwise_spec_decode_num_drafts_total"] > 0
    plain = serve(copying["bigram"], max_model_len=256, kv_cache_memory=2**20)
    assert "draft_n" not in httpx2.post(f"{plain.url}/v1/completions", json=body, timeout=60).json()["timings"]
