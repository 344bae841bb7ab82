"""The engine's native CPU kernels (`torch.ops.kvwise.*`), built once per machine.

torch has no op that attends over scattered cache slots, and vLLM's CPU build reads its paged cache
in place with C++ kernels of its own; `csrc/paged_attention.cpp` does the same for decodes (and
writes the step's keys and values into their slots), `csrc/prefill_attention.cpp` attends prompt
chunks with grouped heads in large GEMMs, `csrc/matvec.cpp` streams decode rows through
each projection, `csrc/sampling.cpp` fuses the sampler's passes over the logits and
`csrc/layers.cpp` a layer's RMSNorm, rope and MLP activation. They are compiled here against the
installed torch (the headers and libraries `torch.utils.cpp_extension` names, ATen's vector types
for the CPU's capability, as inductor compiles its kernels) by the system's C++ compiler, with no
Python module around them, so neither ninja nor pybind11 is needed, into one library cached under
the user's cache directory by a key of the sources, the torch build and the flags. Without a
compiler, or when the build fails, `load()` logs why once and returns False, and `ops.select`
gives the engine the torch forms of every op: the same tokens, only slower.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import torch
from torch.utils import cpp_extension

from local_backend._constants import KERNEL_BUILD_TIMEOUT_S

logger = logging.getLogger(__name__)

CSRC = Path(__file__).parent / "csrc"
SOURCES = sorted(CSRC.glob("*.cpp"))
LANES = 8
"""Floats per vector in the attention kernels: a head_dim they serve must be a multiple of it."""


def _flags() -> list[str]:
    abi = int(torch._C._GLIBCXX_USE_CXX11_ABI)
    flags = ["-O3", "-std=c++20", "-fopenmp", "-fPIC", "-shared", f"-D_GLIBCXX_USE_CXX11_ABI={abi}", "-w"]
    if torch.backends.cpu.get_cpu_capability() in ("AVX2", "AVX512"):
        flags += ["-mavx2", "-mfma", "-DCPU_CAPABILITY=AVX2", "-DCPU_CAPABILITY_AVX2"]
    return flags


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "kvwise" / "kernels"


def library_path() -> Path:
    """Where the built library lives: one file per version of `csrc/` (headers too), torch build and flags."""
    key = hashlib.sha256(b"".join(path.read_bytes() for path in sorted(CSRC.iterdir()) if path.is_file()))
    key.update(f"{torch.__version__} {torch.__file__} {' '.join(_flags())}".encode())
    return _cache_dir() / f"kvwise_kernels-{key.hexdigest()[:16]}.so"


def _build(target: Path) -> None:
    compiler = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++")
    if compiler is None:
        raise RuntimeError("no C++ compiler (c++ or g++, or $CXX) on PATH")
    libraries = cpp_extension.library_paths()
    includes = [f"-I{p}" for p in cpp_extension.include_paths()]
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as scratch:  # processes racing to build each write their own
        objects = [str(Path(scratch) / f"{source.stem}.o") for source in SOURCES]
        _run([[compiler, *_flags(), *includes, "-c", str(src), "-o", obj] for src, obj in zip(SOURCES, objects)])
        built = str(Path(scratch) / target.name)
        linking = [*(f"-L{p}" for p in libraries), *(f"-Wl,-rpath,{p}" for p in libraries), "-lc10", "-ltorch_cpu"]
        _run([[compiler, *_flags(), *objects, *linking, "-o", built]])
        os.replace(built, target)


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
def load() -> bool:
    """Register the kernels' ops in this process (building them first if this machine has not); False if it cannot."""
    try:
        target = library_path()
        if not target.exists():
            logger.info("building the native CPU kernels into %s (once per machine)", target)
            _build(target)
        torch.ops.load_library(str(target))
    except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
        logger.warning("native CPU kernels unavailable, the engine runs on torch ops alone: %s", exc)
        return False
    return True

