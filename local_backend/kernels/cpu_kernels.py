"""The engine's native CPU kernels (`torch.ops.kvwise.*`), built once per machine and CPU capability.

torch has no op that attends over scattered cache slots, and vLLM's CPU build reads its paged cache
in place with C++ kernels of its own; `csrc/paged_attention.cpp` does the same for decodes (and
writes the step's keys and values into their slots), `csrc/prefill_attention.cpp` attends prompt
chunks with grouped heads in large GEMMs, `csrc/matvec.cpp` streams decode rows through
each projection, `csrc/sampling.cpp` fuses the sampler's passes over the logits and
`csrc/layers.cpp` a layer's RMSNorm, rope and MLP activation; `csrc/decode_layers.cpp` loops a decode
step's layers over those kernels in one call. They are compiled here against the
installed torch (the headers and libraries `torch.utils.cpp_extension` names) by the system's C++
compiler, with no Python module around them, so neither ninja nor pybind11 is needed.

As ATen compiles its own kernels once per CPU capability, there is one library per capability:
`AVX512` (ATen's `Vectorized<float>` 16 lanes wide), `AVX2` (8) and the portable `DEFAULT` (no
instruction-set flags), each cached under the user's cache directory by a key of the sources, the
torch build and the flags. `load()` takes the capability torch reports (`ATEN_CPU_CAPABILITY` moves
it, `KVWISE_CPU_CAPABILITY` moves only these kernels), clamped to what this CPU executes, and picks
the ops' thresholds for it (`kernel_choices`). A process holds one variant: the ops' names are
registered once per process. Without a compiler, or when the build fails, `load()` logs why once
and returns None, and `ops.select` gives the engine the torch forms of every op: the same tokens,
only slower.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import platform
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import torch
from torch.utils import cpp_extension

from local_backend._constants import KERNEL_BUILD_TIMEOUT_S, KERNEL_CACHE_DIR_ENV
from local_backend.kernels import kernel_choices
from local_backend.kernels.kernel_choices import KernelChoices

logger = logging.getLogger(__name__)

CSRC = Path(__file__).parent / "csrc"
SOURCES = sorted(CSRC.glob("*.cpp"))
HEAD_DIM_MULTIPLE: Final = 8
"""A head_dim the attention kernels serve is a multiple of it (AVX-512 rows end in a masked half vector)."""

CAPABILITY_ENV: Final = "KVWISE_CPU_CAPABILITY"
"""Environment variable naming the kernels' capability (`DEFAULT`, `AVX2`, `AVX512`) instead of torch's."""

CAPABILITY_FLAGS: Final = {
    "DEFAULT": ("-DCPU_CAPABILITY=DEFAULT", "-DCPU_CAPABILITY_DEFAULT"),
    "AVX2": ("-mavx2", "-mfma", "-mf16c", "-DCPU_CAPABILITY=AVX2", "-DCPU_CAPABILITY_AVX2"),
    "AVX512": (
        "-mavx512f",
        "-mavx512bw",
        "-mavx512vl",
        "-mavx512dq",
        "-mfma",
        "-mf16c",
        "-DCPU_CAPABILITY=AVX512",
        "-DCPU_CAPABILITY_AVX512",
    ),
}
"""The compiler flags of each capability, ascending: ATen's own per-capability flags for its vector types, and F16C
(every AVX2 and AVX-512 CPU has it) for the one-instruction fp16 scales of quantized blocks."""

CAPABILITIES: Final = tuple(CAPABILITY_FLAGS)


@dataclass(frozen=True, slots=True)
class Kernels:
    """The kernel library this process loaded: its capability, floats per vector, file and the ops' thresholds."""

    capability: str
    lanes: int
    path: Path
    choices: KernelChoices


def executable_capability() -> str:
    """The widest capability this CPU executes (cpuinfo's answer, as ATen's dispatch asks it)."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return "DEFAULT"
    if torch.cpu._is_avx512_supported():
        return "AVX512"
    return "AVX2" if torch.cpu._is_avx2_supported() else "DEFAULT"


def buildable_capabilities() -> tuple[str, ...]:
    """The capabilities the compiler can target here: every x86 one on x86, the portable one elsewhere."""
    return CAPABILITIES if platform.machine().lower() in ("x86_64", "amd64") else ("DEFAULT",)


def requested_capability() -> str:
    """`KVWISE_CPU_CAPABILITY` if set, else torch's capability (non-x86 ones build the portable path),
    clamped to `executable_capability()`."""
    named = os.environ.get(CAPABILITY_ENV, "").strip().upper()
    if named and named not in CAPABILITY_FLAGS:
        raise ValueError(f"{CAPABILITY_ENV}={named!r}: expected one of {', '.join(CAPABILITIES)}")
    wanted = named or torch.backends.cpu.get_cpu_capability()
    wanted = wanted if wanted in CAPABILITY_FLAGS else "DEFAULT"
    ceiling = executable_capability()
    if CAPABILITIES.index(wanted) > CAPABILITIES.index(ceiling):
        logger.warning("this CPU cannot execute %s kernels; building %s instead", wanted, ceiling)
        return ceiling
    return wanted


def _flags(capability: str) -> list[str]:
    abi = int(torch._C._GLIBCXX_USE_CXX11_ABI)
    flags = ["-O3", "-std=c++20", "-fopenmp", "-fPIC", "-shared", f"-D_GLIBCXX_USE_CXX11_ABI={abi}", "-w"]
    return flags + list(CAPABILITY_FLAGS[capability])


def _cache_dir() -> Path:
    """$KVWISE_KERNEL_CACHE_DIR where set (as torch's TORCHINDUCTOR_CACHE_DIR and Triton's TRITON_CACHE_DIR: a
    process whose cache home is private, a test's, still finds the build), else the user's cache directory."""
    if own := os.environ.get(KERNEL_CACHE_DIR_ENV):
        return Path(own)
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "kvwise" / "kernels"


def library_path(capability: str) -> Path:
    """Where a capability's library lives: one file per version of `csrc/` (headers too), torch build and flags."""
    key = hashlib.sha256(b"".join(path.read_bytes() for path in sorted(CSRC.iterdir()) if path.is_file()))
    key.update(f"{torch.__version__} {torch.__file__} {' '.join(_flags(capability))}".encode())
    return _cache_dir() / f"kvwise_kernels-{capability.lower()}-{key.hexdigest()[:16]}.so"


def build(capability: str) -> Path:
    """The capability's library, compiled first if this machine has none yet (raises why it cannot)."""
    target = library_path(capability)
    if target.exists():
        return target
    compiler = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++")
    if compiler is None:
        raise RuntimeError("no C++ compiler (c++ or g++, or $CXX) on PATH")
    logger.info("building the native CPU kernels (%s) into %s (once per machine)", capability, target)
    flags = _flags(capability)
    libraries = cpp_extension.library_paths()
    includes = [f"-I{p}" for p in cpp_extension.include_paths()]
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as scratch:  # processes racing to build each write their own
        objects = [str(Path(scratch) / f"{source.stem}.o") for source in SOURCES]
        _run([[compiler, *flags, *includes, "-c", str(src), "-o", obj] for src, obj in zip(SOURCES, objects)])
        built = str(Path(scratch) / target.name)
        linking = [*(f"-L{p}" for p in libraries), *(f"-Wl,-rpath,{p}" for p in libraries), "-lc10", "-ltorch_cpu"]
        _run([[compiler, *flags, *objects, *linking, "-o", built]])
        os.replace(built, target)
    return target


def _run(commands: list[list[str]]) -> None:
    """Run the commands side by side (one compiler per source); raise with the first one's errors."""
    running = [(command, subprocess.Popen(command, stderr=subprocess.PIPE, text=True)) for command in commands]
    failures = []
    for command, process in running:
        _, errors = process.communicate(timeout=KERNEL_BUILD_TIMEOUT_S)
        if process.returncode != 0:
            failures.append(f"{command[0]} failed: {errors.strip()[-2000:]}")
    if failures:
        raise RuntimeError(failures[0])


@functools.cache
def load() -> Kernels | None:
    """Register the kernels' ops in this process (building them first if this machine has not); None if it cannot.

    Logs the variant and the thresholds chosen for it, once per process.
    """
    capability = requested_capability()
    try:
        path = build(capability)
        torch.ops.load_library(str(path))
    except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
        logger.warning("native CPU kernels unavailable, the engine runs on torch ops alone: %s", exc)
        return None
    lanes = int(torch.ops.kvwise.vector_lanes())
    choices = kernel_choices.for_library(path, capability)
    logger.info(
        "native CPU kernels: %s, %d floats per vector, %s; %s", capability, lanes, path.name, choices.describe()
    )
    return Kernels(capability, lanes, path, choices)


def loaded() -> Kernels | None:
    """The kernels `load()` registered in this process; None before it ran or when it failed (never builds)."""
    return load() if load.cache_info().currsize else None
