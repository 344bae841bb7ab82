"""Every engine knob, once: what `Engine.from_config`, `Engine.from_pretrained`, the CLI and the benchmarks build.

    config = EngineConfig(model="default", max_model_len=4096, enable_prefix_caching=False)
    engine = Engine.from_config(config)

The names, meanings and defaults are vLLM's (`vllm serve --max-model-len ...`) where the knob
applies to this engine; `serve_arguments()` gives the command line either server takes for them.
A value that cannot work raises `ConfigError` naming the field; checks that need the checkpoint or
the device (the model's length limit, CUDA for `gpu_memory_utilization`) run in `Engine.from_config`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Final

from local_backend import _constants as C
from local_backend.engine.speculative import SpeculativeConfig
from local_backend.kernels.kv_quant import KV_CACHE_DTYPES
from local_backend.kernels.quantized import QUANTIZATION_AUTO, QUANTIZATIONS
from local_backend.sampling.knobs import SAMPLING_KNOBS
from local_backend.sampling.sampling_params import SamplingParams

DTYPES: Final = ("auto", "float32", "float", "bfloat16", "float16", "half")
"""vLLM's `--dtype` names; `float` is float32 and `half` float16, as there."""

DTYPE_ALIASES: Final = {"float": "float32", "half": "float16"}
"""The `--dtype` names that are not torch's, and the torch name each stands for."""

GENERATION_CONFIG_AUTO: Final = "auto"
"""`generation_config`: read the checkpoint's `generation_config.json` for default sampling params."""

GENERATION_CONFIG_VLLM: Final = "vllm"
"""`generation_config`: ignore any `generation_config.json` (vLLM's own defaults)."""

GENERATION_CONFIG_FILE: Final = "generation_config.json"

GENERATION_DEFAULT_KEYS: Final = {
    **{knob.name: knob.name for knob in SAMPLING_KNOBS if knob.generation_default},
    "max_new_tokens": "max_tokens",
}
"""`generation_config.json` key → `SamplingParams` field: the keys vLLM reads as a request's defaults
(the knobs `sampling/knobs.py` marks, under their own name, and the cap under transformers' name)."""

_JINJA_CHARS: Final = "{}\n"
"""A `chat_template` holding one of these is a template, not a path (vLLM's rule)."""


class ConfigError(ValueError):
    """An `EngineConfig` value that cannot work; `field` names it (the CLI shows it as `--field-name`)."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field

    @property
    def option(self) -> str:
        """The `serve` command-line option of the field."""
        return "--" + self.field.replace("_", "-")


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """How one engine is built: the checkpoint, where it runs, the KV pool, the batch, the defaults.

    - `model`: a Hugging Face checkpoint directory, or `"default"` for the bundled model.
    - `device` `"auto"` is CUDA when available, else CPU; `dtype` `"auto"` is bfloat16 on CUDA and on
      a CPU with AVX512-BF16 or AMX, float32 on other CPUs (`dtype_choice`).
    - The KV pool: `kv_cache_memory` bytes (default 512 MiB on CPU, half the free GPU memory), or on
      CUDA `gpu_memory_utilization` (vLLM's: the share of the GPU's memory this engine may hold,
      weights included); num_blocks = min(memory ÷ (block_size × kv_bytes_per_token),
      max_num_seqs × ⌈max_model_len ÷ block_size⌉).
    - `max_model_len` (prompt + output): None is min(8192, the model's limit); past that limit it is
      refused. It is cut to what the pool holds (`serve` refuses a given value it would cut, as
      vLLM does, so `/v1/models` reports what it was given).
    - `max_num_seqs` caps the running batch; `max_num_batched_tokens` is the per-step token budget
      that chunks long prompts (at least `max_num_seqs`, vLLM's rule).
    - `enable_prefix_caching=False` names no block: every prompt is computed in full.
    - `chat_template`: a file path, or the Jinja template itself (a string with `{`, `}` or a
      newline; escapes such as `\\n` are read, vLLM's single-line form); None: the checkpoint's.
    - `generation_config`: `"auto"` takes default sampling params (temperature, top_p, top_k, min_p,
      repetition_penalty, max_new_tokens) from the checkpoint's `generation_config.json`, `"vllm"`
      ignores it, or a folder holding one. A request's own values win.
    - `kv_cache_dtype`: `"auto"` stores keys and values in the model's dtype; `"int8"` as 8-bit codes
      with one float scale per token and kv head (about a quarter of float32's bytes, so the same
      `kv_cache_memory` holds more tokens); `"fp8_e4m3"` likewise with float8 codes, where torch
      converts to float8 on the device (else refused).
    - `speculative_config`: n-gram speculative decoding (`SpeculativeConfig`; a dict or its JSON,
      vLLM's `{"method": "ngram", "num_speculative_tokens": K, "prompt_lookup_max": N}`, is read
      into one); None decodes one token per step.
    - `quantization` (vLLM's name): `"auto"` keeps a GGUF file's Q8_0, Q4_0, Q4_1, Q4_K, Q5_K and Q6_K
      weights as their blocks, which the native CPU kernels multiply by (a decode step streams 4.5-8.5 bits a
      weight, not 16 or 32);
      `"none"` dequantizes every weight to `dtype` at load; `"q8_0"` quantizes the projections and the
      embedding to Q8_0 at load (a float checkpoint's too). Elsewhere than the native CPU kernels, blocks are
      dequantized at load (`loader.load_model`).
    """

    model: str = C.DEFAULT_MODEL_NAME
    device: str = "auto"
    dtype: str = "auto"
    kv_cache_memory: int | None = None
    block_size: int = C.DEFAULT_BLOCK_SIZE
    max_num_seqs: int = C.DEFAULT_MAX_NUM_SEQS
    max_model_len: int | None = None
    max_num_batched_tokens: int = C.DEFAULT_MAX_NUM_BATCHED_TOKENS
    enable_prefix_caching: bool = True
    gpu_memory_utilization: float | None = None
    chat_template: str | None = None
    generation_config: str = GENERATION_CONFIG_AUTO
    speculative_config: SpeculativeConfig | None = None
    kv_cache_dtype: str = "auto"
    quantization: str = QUANTIZATION_AUTO

    def __post_init__(self) -> None:
        object.__setattr__(self, "model", str(self.model))
        if isinstance(self.speculative_config, (str, Mapping)):
            try:
                object.__setattr__(self, "speculative_config", SpeculativeConfig.parse(self.speculative_config))
            except ValueError as exc:
                raise ConfigError(
                    "speculative_config", f"speculative_config={self.speculative_config!r}: {exc}"
                ) from None
        object.__setattr__(self, "dtype", DTYPE_ALIASES.get(self.dtype, self.dtype))
        checks = [
            ("model", bool(self.model), "must name a checkpoint directory or 'default'"),
            (
                "device",
                self.device == "auto" or self.device.split(":")[0] in ("cpu", "cuda"),
                "must be 'auto', 'cpu' or 'cuda[:N]'",
            ),
            ("dtype", self.dtype in DTYPES, f"must be one of {', '.join(DTYPES)}"),
            ("kv_cache_memory", self.kv_cache_memory is None or self.kv_cache_memory >= 1, "must be >= 1 byte"),
            ("block_size", self.block_size >= 1, "must be >= 1"),
            ("max_num_seqs", self.max_num_seqs >= 1, "must be >= 1"),
            ("max_model_len", self.max_model_len is None or self.max_model_len >= 1, "must be >= 1"),
            (
                "max_num_batched_tokens",
                self.max_num_batched_tokens >= self.max_num_seqs,
                f"must be >= max_num_seqs ({self.max_num_seqs}), or a full batch could not decode in one step",
            ),
            (
                "gpu_memory_utilization",
                self.gpu_memory_utilization is None or 0 < self.gpu_memory_utilization <= 1,
                "must be in (0, 1]",
            ),
            (
                "gpu_memory_utilization",
                self.gpu_memory_utilization is None or self.device != "cpu",
                "applies to CUDA only: on CPU bound the KV cache with kv_cache_memory",
            ),
            (
                "gpu_memory_utilization",
                self.gpu_memory_utilization is None or self.kv_cache_memory is None,
                "and kv_cache_memory both size the KV cache: give one",
            ),
            ("kv_cache_dtype", self.kv_cache_dtype in KV_CACHE_DTYPES, f"must be one of {', '.join(KV_CACHE_DTYPES)}"),
            ("quantization", self.quantization in QUANTIZATIONS, f"must be one of {', '.join(QUANTIZATIONS)}"),
            ("chat_template", self.chat_template is None or bool(self.chat_template), "must not be empty"),
            (
                "generation_config",
                bool(self.generation_config),
                f"must be '{GENERATION_CONFIG_AUTO}', '{GENERATION_CONFIG_VLLM}' or a folder",
            ),
        ]
        for name, ok, rule in checks:
            if not ok:
                raise ConfigError(name, f"{name}={getattr(self, name)!r} {rule}")

    def read_chat_template(self) -> str | None:
        """The template `chat_template` gives (read from its file, or itself), or None for the checkpoint's."""
        template = self.chat_template
        if template is None:
            return None
        if any(char in template for char in _JINJA_CHARS):  # escapes read; any other character kept as it is
            return template.encode("latin-1", "backslashreplace").decode("unicode_escape")
        try:
            return Path(template).read_text()
        except OSError as exc:
            raise ConfigError(
                "chat_template",
                f"chat_template={template!r} looks like a file path but cannot be "
                f"read ({exc.strerror}); pass a readable file or the template itself",
            ) from None

    def generation_defaults(self, checkpoint: Path | None) -> dict[str, Any]:
        """The sampling defaults `generation_config` gives for `checkpoint` (`SamplingParams` field names);
        a checkpoint of one file (GGUF, None here) has no `generation_config.json` of its own."""
        if self.generation_config == GENERATION_CONFIG_VLLM:
            return {}
        folder = checkpoint if self.generation_config == GENERATION_CONFIG_AUTO else Path(self.generation_config)
        if folder is None:
            return {}
        if not folder.is_dir():
            raise ConfigError(
                "generation_config",
                f"generation_config={self.generation_config!r} is not a folder "
                f"(nor '{GENERATION_CONFIG_AUTO}' or '{GENERATION_CONFIG_VLLM}')",
            )
        path = folder / GENERATION_CONFIG_FILE
        if not path.is_file():
            return {}
        try:
            raw: Mapping[str, Any] = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise ConfigError("generation_config", f"{path} cannot be read as JSON: {exc}") from None
        defaults = {
            ours: raw[theirs] for theirs, ours in GENERATION_DEFAULT_KEYS.items() if raw.get(theirs) is not None
        }
        if defaults.get("top_k", 1) < 1:  # transformers' and vLLM's 0 (and -1): no top-k filter
            del defaults["top_k"]
        try:
            SamplingParams(**defaults)
        except (TypeError, ValueError) as exc:
            raise ConfigError("generation_config", f"{path} gives defaults that cannot sample: {exc}") from None
        return defaults

    def serve_arguments(self) -> list[str]:
        """The `serve` options giving every field but `model` that differs from its default (vLLM's
        names, so `vllm serve` takes those it has too); the model goes apart (`--model` here, first
        to `vllm serve`)."""
        arguments: list[str] = []
        for field in fields(self):
            value = getattr(self, field.name)
            if field.name == "model" or value == field.default:
                continue
            option = "--" + field.name.replace("_", "-")
            if isinstance(value, bool):
                arguments.append(option if value else "--no-" + option[2:])
            elif isinstance(value, SpeculativeConfig):
                arguments += [option, value.to_json()]
            else:
                arguments += [option, str(value)]
        return arguments
