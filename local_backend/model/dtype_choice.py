"""What `--dtype auto` computes in: bfloat16 where the hardware multiplies it, float32 elsewhere, and why.

On CUDA it is bfloat16. On a CPU with AVX512-BF16 (bfloat16 dot products) or AMX (bfloat16 tile
multiplies, which oneDNN's GEMMs run on) it is bfloat16, as vLLM-CPU's default is there: the weights and
the KV cache take half the bytes a decode step streams, and prompts multiply on the tiles. A CPU
without either converts bfloat16 in software, so float32 is as fast there and more exact. The choice
carries its reason, which the startup log and `/metrics` show.
"""

from __future__ import annotations

import logging
import platform
from dataclasses import dataclass

import torch

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class DtypeChoice:
    """The dtype an engine computes in, and the sentence saying why (`auto`'s rule, or that it was asked for)."""

    dtype: torch.dtype
    reason: str

    @property
    def name(self) -> str:
        return str(self.dtype).removeprefix("torch.")


def cpu_bf16_features() -> tuple[str, ...]:
    """The CPU's native bfloat16 features, by their /proc/cpuinfo flag names (empty off x86)."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return ()
    found = {"avx512_bf16": torch.cpu._is_avx512_bf16_supported(), "amx_bf16": torch.cpu._is_amx_tile_supported()}
    return tuple(name for name, present in found.items() if present)


def choose(device: torch.device, dtype: str | torch.dtype) -> DtypeChoice:
    """`dtype` on `device`: a torch dtype or its name as given, or `"auto"` resolved by the rule above."""
    if dtype != "auto":
        resolved = getattr(torch, dtype, None) if isinstance(dtype, str) else dtype
        if not isinstance(resolved, torch.dtype):
            raise ValueError(f"dtype={dtype!r} is not a torch dtype name")
        return DtypeChoice(resolved, "asked for")
    choice = _auto(device)
    logger.info("dtype auto on %s: %s (%s)", device, choice.name, choice.reason)
    return choice


def _auto(device: torch.device) -> DtypeChoice:
    if device.type == "cuda":
        return DtypeChoice(torch.bfloat16, "auto: CUDA")
    features = cpu_bf16_features()
    if features:
        return DtypeChoice(torch.bfloat16, f"auto: this CPU executes bfloat16 natively ({', '.join(features)})")
    return DtypeChoice(
        torch.float32, "auto: this CPU has neither AVX512-BF16 nor AMX, so bfloat16 would be converted in software"
    )


def explain(device: str, dtype: str) -> DtypeChoice:
    """An engine's resolved dtype (`EngineConfig.device` and `.dtype` in effect) with its reason: `auto`'s, where
    `auto` gives this dtype on this device, else "asked for"."""
    resolved = getattr(torch, dtype)
    auto = _auto(torch.device(device))
    return auto if auto.dtype == resolved else DtypeChoice(resolved, "asked for")
