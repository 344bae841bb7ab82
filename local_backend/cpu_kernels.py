"""The engine's native CPU kernel, `torch.ops.kvwise.paged_decode_attention`, built once per machine.

torch has no op that attends over scattered cache slots, and vLLM's CPU build reads its paged cache
in place with a C++ kernel of its own; `csrc/paged_attention.cpp` does the same for decodes. It is
compiled here against the installed torch (the headers and libraries `torch.utils.cpp_extension`
names) by the system's C++ compiler, with no Python module around it, so neither ninja nor
pybind11 is needed, and cached under the user's cache directory by a key of the source, the torch
build and the CPU's vector capability. Without a compiler, or when the build fails, `load()` logs
why once and returns False: attention keeps its SDPA path, only slower.
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

SOURCE = Path(__file__).with_name("csrc") / "paged_attention.cpp"
LANES = 8
"""Floats per vector in the kernel: a head_dim it serves must be a multiple of it."""


def _flags() -> list[str]:
    abi = int(torch._C._GLIBCXX_USE_CXX11_ABI)
    flags = ["-O3", "-std=c++20", "-fopenmp", "-fPIC", "-shared", f"-D_GLIBCXX_USE_CXX11_ABI={abi}", "-w"]
    if torch.backends.cpu.get_cpu_capability() in ("AVX2", "AVX512"):
        flags += ["-mavx2", "-mfma"]
    return flags


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "kvwise" / "kernels"


def library_path() -> Path:
    """Where the built library lives: one file per source, torch build and compiler flags."""
    key = hashlib.sha256(SOURCE.read_bytes())
    key.update(f"{torch.__version__} {torch.__file__} {' '.join(_flags())}".encode())
    return _cache_dir() / f"paged_attention-{key.hexdigest()[:16]}.so"


def _build(target: Path) -> None:
    compiler = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++")
    if compiler is None:
        raise RuntimeError("no C++ compiler (c++ or g++, or $CXX) on PATH")
    libraries = cpp_extension.library_paths()
    command = [
        compiler, *_flags(), *(f"-I{p}" for p in cpp_extension.include_paths()), str(SOURCE),
        *(f"-L{p}" for p in libraries), *(f"-Wl,-rpath,{p}" for p in libraries), "-lc10", "-ltorch_cpu",
    ]  # fmt: skip
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as scratch:  # processes racing to build each write their own
        built = Path(scratch) / target.name
        command += ["-o", str(built)]
        done = subprocess.run(command, capture_output=True, text=True, timeout=KERNEL_BUILD_TIMEOUT_S)
        if done.returncode != 0:
            raise RuntimeError(f"{compiler} failed: {done.stderr.strip()[-2000:]}")
        os.replace(built, target)


@functools.cache
def load() -> bool:
    """Register the kernel's op in this process (building it first if this machine has not); False if it cannot be."""
    try:
        target = library_path()
        if not target.exists():
            logger.info("building the paged attention kernel into %s (once per machine)", target)
            _build(target)
        torch.ops.load_library(str(target))
    except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
        logger.warning("native CPU attention unavailable, using SDPA: %s", exc)
        return False
    return True


def serves(device: torch.device, dtype: torch.dtype, head_dim: int) -> bool:
    """Whether decodes on this cache can use the kernel (loading it on first ask)."""
    return device.type == "cpu" and dtype == torch.float32 and head_dim % LANES == 0 and load()
