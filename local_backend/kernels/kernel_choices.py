"""Where each native CPU kernel hands over to its torch form, measured on this machine once per kernel library.

Each threshold is the size at which one form overtakes the other: decode rows through `kvwise::matvec`
or oneDNN, a projection's rows through oneDNN's prepacked weight or the plain matmul (both in float32,
and again in bfloat16, where oneDNN may multiply on AMX tiles), a prefill chunk's keys through
`kvwise::prefill_attention` or SDPA. Where those crossovers fall depends on the CPU (vector width,
caches, memory bandwidth, native bfloat16) and on the library's capability, so they are not constants:
at the first load of a library, `for_library` times both forms at the sizes of
`_constants.CALIBRATION_*` (best of a few interleaved runs, on weights larger than the caches, as a
decode step streams them), puts each threshold where the measured sizes take the least time in all, and
writes the choice, with the timings it was made from, as JSON beside the library; every later load of
that library reads it back. Delete the file to measure again. On a machine busier than
`CALIBRATION_MAX_LOAD_PER_CORE` the other processes would decide the choice: it takes the tuned defaults
(`MATVEC_MAX_ROWS`, ...) for this process and measures at a later, quieter load.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from local_backend._constants import (
    BF16_MATVEC_MAX_ROWS,
    CALIBRATION_HEAD_DIM,
    CALIBRATION_HEADS,
    CALIBRATION_HIDDEN,
    CALIBRATION_KV_HEADS,
    CALIBRATION_MATRICES,
    CALIBRATION_MATVEC_ROWS,
    CALIBRATION_MAX_LOAD_PER_CORE,
    CALIBRATION_ONEDNN_ROWS,
    CALIBRATION_PREFILL_CONTEXTS,
    CALIBRATION_PROJECTION,
    CALIBRATION_REPEATS,
    MATVEC_MAX_ROWS,
    ONEDNN_MIN_ROWS,
    PREFILL_KERNEL_MAX_CONTEXT,
)

logger = logging.getLogger(__name__)

_THRESHOLDS = (
    "matvec_max_rows",
    "onednn_min_rows",
    "prefill_kernel_max_context",
    "bf16_matvec_max_rows",
    "bf16_onednn_min_rows",
)
"""`KernelChoices`' measured fields, as the cache file names them."""


@dataclass(frozen=True, slots=True)
class KernelChoices:
    """The thresholds `ops.NativeOps` runs with, and where they come from: "calibrated" now, "cached"
    (measured by an earlier load) or "default" (the machine was too busy to measure).

    A float32 projection of `rows` rows runs `kvwise::matvec` when rows <= `matvec_max_rows` (0: never),
    else oneDNN's prepacked weight when rows >= `onednn_min_rows`, else the plain matmul; a bfloat16 one
    likewise by `bf16_matvec_max_rows` and `bf16_onednn_min_rows` (oneDNN's bfloat16 GEMM runs on AMX
    tiles or AVX512-BF16 where the CPU has them, so its crossover with the streamed matvec lies elsewhere);
    a float32 prefill chunk over `keys` keys runs `kvwise::prefill_attention` when keys <=
    `prefill_kernel_max_context`.
    """

    capability: str
    matvec_max_rows: int
    onednn_min_rows: int
    prefill_kernel_max_context: int
    bf16_matvec_max_rows: int = BF16_MATVEC_MAX_ROWS
    bf16_onednn_min_rows: int = ONEDNN_MIN_ROWS
    source: str = "calibrated"

    def __post_init__(self) -> None:
        for name in _THRESHOLDS:
            value = getattr(self, name)
            if not isinstance(value, int) or value < 0:
                raise ValueError(f"KernelChoices.{name} must be an int >= 0, got {value!r}")

    def describe(self) -> str:
        return (
            f"matvec up to {self.matvec_max_rows} rows, oneDNN from {self.onednn_min_rows} rows, prefill kernel "
            f"up to {self.prefill_kernel_max_context} keys; bfloat16: matvec up to {self.bf16_matvec_max_rows} "
            f"rows, oneDNN from {self.bf16_onednn_min_rows} rows ({self.source})"
        )

    def rows(self, dtype: torch.dtype) -> tuple[int, int]:
        """(matvec_max_rows, onednn_min_rows) of a projection in `dtype`."""
        if dtype == torch.bfloat16:
            return self.bf16_matvec_max_rows, self.bf16_onednn_min_rows
        return self.matvec_max_rows, self.onednn_min_rows

    def labels(self) -> dict[str, str]:
        """The choices as string labels (`/metrics`' kernel info)."""
        return {name: str(value) for name, value in asdict(self).items()}


def choices_path(library: Path) -> Path:
    """The JSON beside a kernel library: same name, so it is keyed as the library is."""
    return library.with_suffix(".json")


def for_library(library: Path, capability: str) -> KernelChoices:
    """The choices cached beside `library`, or measured now and cached (its ops must be loaded)."""
    path = choices_path(library)
    try:
        saved = json.loads(path.read_text())
        return KernelChoices(capability, **{name: int(saved[name]) for name in _THRESHOLDS}, source="cached")
    except FileNotFoundError:
        pass
    except (OSError, ValueError, KeyError, TypeError) as exc:
        logger.warning("ignoring unreadable kernel choices in %s (%s); measuring again", path, exc)
    load = os.getloadavg()[0]
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    if load > CALIBRATION_MAX_LOAD_PER_CORE * cores:
        logger.info(
            "load average %.1f on %d cores: too busy to measure the kernels' thresholds; the defaults", load, cores
        )
        return KernelChoices(capability, MATVEC_MAX_ROWS, ONEDNN_MIN_ROWS, PREFILL_KERNEL_MAX_CONTEXT, source="default")
    choices, timings = calibrate(capability)
    record = {**asdict(choices), "timings_ms": timings}
    del record["source"]
    scratch = path.with_suffix(f".{time.monotonic_ns()}.tmp")  # processes racing to calibrate each write their own
    scratch.write_text(json.dumps(record, indent=1))
    scratch.replace(path)
    return choices


def _best_ms(forms: Sequence[Callable[[], object]]) -> list[float]:
    """Each form's best time in ms over `CALIBRATION_REPEATS` rounds, the forms taking turns, after a warm-up."""
    best = [float("inf")] * len(forms)
    for form in forms:
        form()
    for _ in range(CALIBRATION_REPEATS):
        for i, form in enumerate(forms):
            start = time.perf_counter()
            form()
            best[i] = min(best[i], (time.perf_counter() - start) * 1e3)
    return best


def _least_total(sizes: Sequence[int], below_ms: Sequence[float], above_ms: Sequence[float]) -> int:
    """The threshold (0 or one of `sizes`) for "the first form up to it, the second past it" that takes the
    least time over all the sizes measured: a near tie at one size cannot move it far."""

    def total(threshold: int) -> float:
        return sum(b if size <= threshold else a for size, b, a in zip(sizes, below_ms, above_ms))

    return min((0, *sizes), key=total)


def onednn_prepacks(dtype: torch.dtype) -> bool:
    """Whether a CPU projection in `dtype` keeps oneDNN's prepacked weight (`llama.Linear.pack`): float32 where
    torch has oneDNN, bfloat16 where oneDNN multiplies it natively (AVX512-BF16 or AMX; elsewhere it would
    widen every weight on each call)."""
    if not torch.backends.mkldnn.is_available():
        return False
    return dtype == torch.float32 or (dtype == torch.bfloat16 and torch.ops.mkldnn._is_mkldnn_bf16_supported())


@torch.inference_mode()
def calibrate(capability: str) -> tuple[KernelChoices, dict[str, dict[str, list[float]]]]:
    """Time both forms of each choice at the calibration sizes; the choices and the timings (ms) behind them."""
    gen = torch.Generator().manual_seed(0)
    timings: dict[str, dict[str, list[float]]] = {}
    matvec_max_rows, onednn_min_rows = _projection_choices(torch.float32, gen, timings, "")
    bf16_matvec_max_rows, bf16_onednn_min_rows = _projection_choices(torch.bfloat16, gen, timings, "bf16_")
    contexts = CALIBRATION_PREFILL_CONTEXTS
    kernel_vs_sdpa = [_best_ms(_prefill_forms(context, gen)) for context in contexts]
    timings["prefill_kernel_vs_sdpa"] = {str(context): ms for context, ms in zip(contexts, kernel_vs_sdpa)}
    prefill_max = _least_total(contexts, [ms[0] for ms in kernel_vs_sdpa], [ms[1] for ms in kernel_vs_sdpa])
    choices = KernelChoices(
        capability, matvec_max_rows, onednn_min_rows, prefill_max, bf16_matvec_max_rows, bf16_onednn_min_rows
    )
    return choices, timings


def _projection_choices(
    dtype: torch.dtype, gen: torch.Generator, timings: dict[str, dict[str, list[float]]], prefix: str
) -> tuple[int, int]:
    """(matvec_max_rows, onednn_min_rows) for projections in `dtype`, their timings added to `timings` under
    `prefix`: the plain matmul against oneDNN's prepacked weight (where a load packs one), then the matvec
    against the torch form that choice makes."""
    weights = [
        torch.randn(CALIBRATION_HIDDEN, CALIBRATION_PROJECTION, generator=gen).to(dtype)
        for _ in range(CALIBRATION_MATRICES)
    ]
    packs = onednn_prepacks(dtype)
    packed = [torch.ops.mkldnn._reorder_linear_weight(w.t().contiguous(), None) for w in weights] if packs else []

    def streamed(project: Callable[[torch.Tensor, int], torch.Tensor], rows: int) -> Callable[[], None]:
        x = torch.randn(rows, CALIBRATION_HIDDEN, generator=gen).to(dtype)

        def run() -> None:
            for i in range(CALIBRATION_MATRICES):
                project(x, i)

        return run

    def plain(x: torch.Tensor, i: int) -> torch.Tensor:
        return x @ weights[i]

    def onednn(x: torch.Tensor, i: int) -> torch.Tensor:
        return torch.ops.mkldnn._linear_pointwise(x, packed[i], None, "none", [], "")

    def matvec(x: torch.Tensor, i: int) -> torch.Tensor:
        return torch.ops.kvwise.matvec(x, weights[i], None)

    onednn_min_rows = ONEDNN_MIN_ROWS
    if packs:
        onednn_rows = CALIBRATION_ONEDNN_ROWS
        plain_vs_onednn = [_best_ms([streamed(plain, rows), streamed(onednn, rows)]) for rows in onednn_rows]
        timings[f"{prefix}plain_vs_onednn"] = {str(rows): ms for rows, ms in zip(onednn_rows, plain_vs_onednn)}
        onednn_min_rows = (
            _least_total(onednn_rows, [ms[0] for ms in plain_vs_onednn], [ms[1] for ms in plain_vs_onednn]) + 1
        )

    def torch_form(x: torch.Tensor, i: int) -> torch.Tensor:
        return onednn(x, i) if packs and len(x) >= onednn_min_rows else plain(x, i)

    matvec_rows = CALIBRATION_MATVEC_ROWS
    matvec_vs_torch = [_best_ms([streamed(matvec, rows), streamed(torch_form, rows)]) for rows in matvec_rows]
    timings[f"{prefix}matvec_vs_torch"] = {str(rows): ms for rows, ms in zip(matvec_rows, matvec_vs_torch)}
    matvec_max_rows = _least_total(matvec_rows, [ms[0] for ms in matvec_vs_torch], [ms[1] for ms in matvec_vs_torch])
    return matvec_max_rows, onednn_min_rows


def _prefill_forms(context: int, gen: torch.Generator) -> list[Callable[[], object]]:
    """A whole prompt of `context` tokens attended by the kernel and by SDPA (the forms `ops` holds)."""
    q = torch.randn(context, CALIBRATION_HEADS, CALIBRATION_HEAD_DIM, generator=gen)
    k, v = torch.randn(2, context, CALIBRATION_KV_HEADS, CALIBRATION_HEAD_DIM, generator=gen)
    scale = CALIBRATION_HEAD_DIM**-0.5
    hq, hk, hv = (t.transpose(0, 1).unsqueeze(0) for t in (q, k, v))
    return [
        lambda: torch.ops.kvwise.prefill_attention(q, k, v, scale),
        lambda: F.scaled_dot_product_attention(hq, hk, hv, is_causal=True, scale=scale, enable_gqa=True),
    ]
