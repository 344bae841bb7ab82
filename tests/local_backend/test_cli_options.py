"""`python -m local_backend serve`'s vLLM options: each changes what the engine or server does, or is
refused naming itself.

The command line is read and built in-process (`parse_args` → `engine_config` → `load_engine` →
`build_app`, what `serve` runs) and served over loopback; one test starts the real CLI.
"""

from __future__ import annotations

import json
import logging
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx2
import pytest
import torch

import local_backend.__main__ as cli
from local_backend import Engine, EngineConfig, SamplingParams
from local_backend.__main__ import build_app, engine_config, load_engine, main, parse_args
from local_backend.engine.engine_config import ConfigError
from local_backend.engine.sequence import Sequence
from local_backend.server import serve_in_thread
from tests.local_backend.serving import Served

SMALL_POOL = str(2**20)
MESSAGES = [{"role": "user", "content": "Hello world"}]


def _args(checkpoint: Path, *options: str, pool: tuple[str, ...] = ("--kv-cache-memory", SMALL_POOL)) -> list[str]:
    return ["serve", "--model", str(checkpoint), "--device", "cpu", *pool, *options]


@contextmanager
def served(checkpoint: Path, *options: str) -> Iterator[Served]:
    """The server `serve` would start with these options, on a loopback port of its own."""
    args = parse_args(_args(checkpoint, *options))
    engine = load_engine(engine_config(args))
    try:
        with serve_in_thread(build_app(args, engine)) as url:
            yield Served(url, engine)
    finally:
        engine.close()


def _complete(url: str, prompt: list[int], **body: object) -> httpx2.Response:
    return httpx2.post(f"{url}/v1/completions", json={"model": "llama", "prompt": prompt, **body}, timeout=60)


@pytest.fixture
def refusal(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Callable[[list[str]], tuple[int, str]]:
    """`refusal(argv)`: (exit status, stderr) of `main(argv)`, whether argparse or the engine refused;
    an option that is not refused fails the test where the server would start listening."""

    def listen(self: object) -> None:
        raise AssertionError("the server started: the option was not refused")

    monkeypatch.setattr(cli._Server, "run", listen)

    def run(argv: list[str]) -> tuple[int, str]:
        try:
            status = main(argv)
        except SystemExit as exit_:
            status = int(exit_.code or 0)
        return status, capsys.readouterr().err

    return run


def test_max_model_len_shows_on_models_and_a_longer_prompt_gets_400(llama_dir):
    with served(llama_dir, "--max-model-len", "64") as server:
        [model] = httpx2.get(f"{server.url}/v1/models").json()["data"]
        assert model["max_model_len"] == 64
        assert _complete(server.url, [5] * 40, max_tokens=4).status_code == 200
        refused = _complete(server.url, [5] * 70, max_tokens=4)
    assert refused.status_code == 400 and "64" in refused.json()["error"]["message"]


def test_no_enable_prefix_caching_gives_no_cached_tokens_on_a_repeat(llama_dir):
    prompt = list(range(10, 60))

    def cached_on_repeat(*options: str) -> int:
        with served(llama_dir, *options) as server:
            _complete(server.url, prompt, max_tokens=1)
            usage = _complete(server.url, prompt, max_tokens=1).json()["usage"]
        return int(usage["prompt_tokens_details"]["cached_tokens"])

    assert cached_on_repeat() == 48  # three full blocks of 16: the default caches them
    assert cached_on_repeat("--no-enable-prefix-caching") == 0
    assert cached_on_repeat("--enable-prefix-caching") == 48


def test_block_size_and_max_num_seqs_show_in_engine_stats(llama_dir):
    with served(llama_dir, "--block-size", "8", "--max-num-seqs", "3") as server:
        prompt = list(range(10, 30))
        _complete(server.url, prompt, max_tokens=1)
        usage = _complete(server.url, prompt, max_tokens=1).json()["usage"]
        stats = server.engine.stats()
    assert (stats.block_size, stats.max_num_seqs) == (8, 3)
    assert usage["prompt_tokens_details"]["cached_tokens"] == 16  # two blocks of 8, not one of 16


@pytest.mark.parametrize(
    ("options", "first_chunk"), [((), 40), (("--max-num-seqs", "2", "--max-num-batched-tokens", "8"), 8)]
)
def test_max_num_batched_tokens_is_the_prefill_chunk_of_a_step(llama_dir, options, first_chunk):
    with load_engine(engine_config(parse_args(_args(llama_dir, *options)))) as engine:
        seq = Sequence("chunked", list(range(10, 50)), SamplingParams(max_tokens=1))
        engine.scheduler.add(seq)
        assert engine.scheduler.schedule().num_tokens == first_chunk
        engine.scheduler.finish(seq)


def test_dtype_sets_the_weights_dtype_and_half_is_float16(llama_dir):
    args = parse_args(_args(llama_dir, "--dtype", "bfloat16"))
    with load_engine(engine_config(args)) as engine:
        assert next(engine.runner.model.parameters()).dtype == torch.bfloat16
        assert engine.engine_config.dtype == "bfloat16"
    assert engine_config(parse_args(_args(llama_dir, "--dtype", "half"))).dtype == "float16"
    assert engine_config(parse_args(_args(llama_dir))).dtype == "auto"


@pytest.mark.parametrize("as_file", [False, True], ids=["inline", "file"])
def test_chat_template_changes_the_rendered_prompt(llama_dir, tmp_path, as_file):
    template = "{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}\\n{% endfor %}"
    if as_file:
        path = tmp_path / "template.jinja"
        path.write_text(template.replace("\\n", "\n"))
        template = str(path)
    with load_engine(engine_config(parse_args(_args(llama_dir, "--chat-template", template)))) as engine:
        assert engine.chat_prompt(MESSAGES) == engine.tokenizer.encode("[user] Hello world\n", add_special_tokens=False)
    with load_engine(engine_config(parse_args(_args(llama_dir)))) as engine:  # the checkpoint's own
        own = "<s><|im_start|>user\nHello world<|im_end|>\n<|im_start|>assistant\n"
        assert engine.chat_prompt(MESSAGES) == engine.tokenizer.encode(own, add_special_tokens=False)


@pytest.fixture
def checkpoint_with_defaults(llama_dir, tmp_path) -> Path:
    """The tiny Llama with a generation_config.json that sets temperature 0 and max_new_tokens 5."""
    copy = tmp_path / "llama"
    shutil.copytree(llama_dir, copy)
    (copy / "generation_config.json").write_text(
        json.dumps({"eos_token_id": 1, "temperature": 0.0, "max_new_tokens": 5})
    )
    return copy


def test_generation_config_auto_takes_the_checkpoints_default_sampling_and_vllm_ignores_it(checkpoint_with_defaults):
    prompt = list(range(10, 30))
    with served(checkpoint_with_defaults, "--max-model-len", "64") as server:
        assert server.engine.default_params().temperature == 0.0
        answers = [_complete(server.url, prompt, ignore_eos=True).json() for _ in range(2)]
        explicit = _complete(server.url, prompt, ignore_eos=True, max_tokens=9).json()
    assert [a["usage"]["completion_tokens"] for a in answers] == [5, 5]  # max_new_tokens, not the room left
    assert answers[0]["choices"][0]["text"] == answers[1]["choices"][0]["text"]  # greedy by default
    assert explicit["usage"]["completion_tokens"] == 9  # the request's own value wins
    with served(checkpoint_with_defaults, "--max-model-len", "64", "--generation-config", "vllm") as server:
        assert server.engine.default_params().temperature == 1.0
        ignored = _complete(server.url, prompt, ignore_eos=True).json()
    assert ignored["usage"]["completion_tokens"] == 64 - 20


def test_generation_config_folder_gives_its_defaults_to_another_checkpoint(llama_dir, checkpoint_with_defaults):
    args = parse_args(_args(llama_dir, "--generation-config", str(checkpoint_with_defaults)))
    with load_engine(engine_config(args)) as engine:
        assert engine.sampling_defaults == {"temperature": 0.0, "max_tokens": 5}


def test_gpu_memory_utilization_is_refused_on_cpu_naming_itself(llama_dir, refusal):
    status, err = refusal(_args(llama_dir, "--gpu-memory-utilization", "0.5", pool=()))
    assert status == 2 and "--gpu-memory-utilization" in err and "CUDA only" in err
    if not torch.cuda.is_available():  # auto resolves to the CPU here: refused once it has
        status, err = refusal(["serve", "--model", str(llama_dir), "--gpu-memory-utilization", "0.5"])
        assert status == 2 and "--gpu-memory-utilization" in err and "runs on cpu" in err


@pytest.mark.parametrize(
    ("option", "value", "says"),
    [
        ("--max-model-len", "0", "must be >= 1"),
        ("--max-model-len", "100000", "model's limit of 512"),
        ("--max-model-len", "1000", "model's limit of 512"),
        ("--kv-cache-memory", str(128 * 512), "--max-model-len: max_model_len=512 is more than the KV cache holds ("),
        ("--block-size", "0", "must be >= 1"),
        ("--max-num-seqs", "0", "must be >= 1"),
        ("--max-num-batched-tokens", "32", "must be >= max_num_seqs (64)"),
        ("--kv-cache-memory", "0", "must be >= 1 byte"),
        ("--dtype", "int8", "invalid choice"),
        ("--quantization", "q4_k", "invalid choice"),
        ("--block-size", "sixteen", "invalid int value"),
        ("--chat-template", "no/such/template.jinja", "cannot be read"),
        ("--chat-template", "{% for %}", "does not parse as Jinja"),
        ("--generation-config", "no/such/folder", "is not a folder"),
    ],
)
def test_a_value_that_cannot_work_is_refused_naming_its_option(llama_dir, refusal, option, value, says):
    status, err = refusal(_args(llama_dir, "--max-model-len", "512", option, value))
    assert status == 2 and option in err and says in err, err


def test_gpu_memory_utilization_and_kv_cache_memory_are_refused_together_naming_the_option(llama_dir, refusal):
    status, err = refusal(
        [
            "serve",
            "--model",
            str(llama_dir),
            "--device",
            "cuda",
            "--kv-cache-memory",
            "4096",
            "--gpu-memory-utilization",
            "0.9",
        ]
    )
    assert status == 2 and "--gpu-memory-utilization" in err and "give one" in err


def test_every_engine_config_field_round_trips_through_the_command_line(llama_dir, tmp_path):
    config = EngineConfig(
        model=str(llama_dir),
        device="cpu",
        dtype="bfloat16",
        kv_cache_memory=2**21,
        block_size=8,
        max_num_seqs=4,
        max_model_len=128,
        max_num_batched_tokens=64,
        enable_prefix_caching=False,
        chat_template="{{ messages }}",
        generation_config=str(tmp_path),
        quantization="q8_0",
    )
    arguments = config.serve_arguments()
    assert "--no-enable-prefix-caching" in arguments and "--model" not in arguments
    assert engine_config(parse_args(["serve", "--model", config.model, *arguments])) == config
    assert EngineConfig().serve_arguments() == []


def test_engine_config_refuses_a_bad_field_naming_it():
    with pytest.raises(ConfigError, match="block_size=0") as refused:
        EngineConfig(block_size=0)
    assert refused.value.option == "--block-size"
    with pytest.raises(ConfigError, match="gpu_memory_utilization"):
        EngineConfig(device="cpu", gpu_memory_utilization=0.5)


def test_from_pretrained_builds_the_same_config_from_keywords(llama_dir):
    with Engine.from_pretrained(
        llama_dir,
        device="cpu",
        dtype=torch.float32,
        max_model_len=64,
        kv_cache_memory=2**20,
        enable_prefix_caching=False,
    ) as engine:
        effective = engine.engine_config
    assert (effective.device, effective.dtype, effective.max_model_len, effective.enable_prefix_caching) == (
        "cpu",
        "float32",
        64,
        False,
    )


def test_startup_logs_the_config_in_effect_once(llama_dir, caplog):
    caplog.set_level(logging.INFO, logger="local_backend")
    with load_engine(engine_config(parse_args(_args(llama_dir, "--max-model-len", "64", "--dtype", "float32")))):
        pass
    [record] = [r for r in caplog.records if "engine config in effect" in r.getMessage()]
    message = record.getMessage()
    assert "device='cpu'" in message and "dtype='float32'" in message and "max_model_len=64" in message
    assert f"kv_cache_memory={2**20}" in message


@pytest.mark.parametrize(("quantization", "kept"), [("q8_0", "Q8_0"), ("none", ""), ("auto", "")])
def test_quantization_shows_in_the_startup_line_and_on_metrics_with_the_block_types_kept(
    llama_dir, caplog, quantization, kept
):
    """A float checkpoint: `q8_0` quantizes its projections and embedding at load; `auto` keeps its floats."""
    from prometheus_client.parser import text_string_to_metric_families

    caplog.set_level(logging.INFO, logger="local_backend")
    with served(llama_dir, "--dtype", "float32", "--quantization", quantization) as server:
        text = httpx2.get(f"{server.url}/metrics").text
        answer = _complete(server.url, list(range(10, 20)), max_tokens=4, temperature=0).json()
        layer = server.engine.core.runner.model.model.layers[0]
    assert answer["usage"]["completion_tokens"] == 4
    [info] = [family for family in text_string_to_metric_families(text) if family.name == "kvwise_quantization_info"]
    assert [sample.labels for sample in info.samples] == [{"quantization": quantization, "kept": kept}]
    assert (layer.mlp.down_proj.quantized is not None) == bool(kept)
    [record] = [r for r in caplog.records if "engine config in effect" in r.getMessage()]
    assert f"quantization='{quantization}'" in record.getMessage()


def test_cli_starts_with_vllms_options_and_reports_them(llama_dir, tmp_path):
    command = [
        sys.executable,
        "-m",
        "local_backend",
        *_args(
            llama_dir,
            "--port",
            "0",
            "--max-model-len",
            "96",
            "--no-enable-prefix-caching",
            "--block-size",
            "8",
            "--served-model-name",
            "tiny",
        ),
    ]
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as process:
        try:
            line = process.stdout.readline()
            assert (url := re.search(r"ready at http://127\.0\.0\.1:(\d+) ", line)), line + process.stderr.read()
            port = int(url[1])
            [model] = httpx2.get(f"http://127.0.0.1:{port}/v1/models").json()["data"]
            assert model["max_model_len"] == 96
            prompt = list(range(10, 40))
            for _ in range(2):
                usage = _complete(f"http://127.0.0.1:{port}", prompt, max_tokens=1, model="tiny").json()["usage"]
            assert usage["prompt_tokens_details"]["cached_tokens"] == 0
        finally:
            process.send_signal(signal.SIGTERM)
            assert process.wait(timeout=60) == 0
        logs = process.stderr.read()
    assert logs.count("engine config in effect") == 1 and "max_model_len=96" in logs and "block_size=8" in logs


def test_an_inline_chat_template_keeps_its_non_ascii_text_and_reads_its_escapes():
    """`ça` once became `Ã§a`: the escapes were read by decoding the template's UTF-8 bytes as Latin-1."""
    inline = "Réponds en français, ça va ? 日本語 😀 {{ messages }}\\n\\t"
    assert (
        EngineConfig(chat_template=inline).read_chat_template()
        == "Réponds en français, ça va ? 日本語 😀 {{ messages }}\n\t"
    )
