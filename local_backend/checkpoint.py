"""What the engine reads from a model's files, whatever their format (a Hugging Face directory, a GGUF file)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import torch

from local_backend.config import ModelConfig
from local_backend.tokenizer import TextTokenizer

Tensors = Iterator[tuple[str, torch.Tensor]]
"""Tensors under their Hugging Face names (`model.layers.0.self_attn.q_proj.weight`), each read as reached."""


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """A model's files, read as far as planning the engine needs; the tokenizer and tensors on demand.

    `open_checkpoint("smollm2-135m-instruct")` (in `model_names`) gives one for any name `--model` takes.
    """

    config: ModelConfig
    generation_folder: Path | None
    """Where `generation_config.json` may lie (a Hugging Face directory); None for a single file."""
    read_tokenizer: Callable[[str | None], TextTokenizer]
    """The tokenizer, the given chat template replacing the checkpoint's own."""
    tensors: Callable[[], Tensors]
    """The weights, read one tensor at a time, in the format's own dtype or dequantized to float32."""
