"""The Makefile's `browser` step of `make test`: as a non-root user without Chromium it stops and names the command.

The root branch installs Debian's `chromium` with apt-get, so it is not run here; this one runs the
real recipe with a PATH that has no browser on it and an `id` that answers a non-root uid. The
other recipes are read from `make -n` (what make would run): `make test`'s order, and `make
llama-server`'s build (minutes of compiling), pointed at an empty folder so every step is shown.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NON_ROOT_UID = 1000
MAKE_TIMEOUT_S = 60
CPU_FEATURE_OPTIONS = {
    "avx2": "-DGGML_AVX2=ON",
    "fma": "-DGGML_FMA=ON",
    "avx512f": "-DGGML_AVX512=ON",
    "avx512_vnni": "-DGGML_AVX512_VNNI=ON",
    "avx512_bf16": "-DGGML_AVX512_BF16=ON",
}
"""/proc/cpuinfo's flag -> the llama.cpp option `make llama-server` names for it where the CPU has it."""


def test_make_test_without_chromium_as_a_non_root_user_stops_with_one_line_naming_the_install_command(
    tmp_path: Path,
) -> None:
    make = shutil.which("make")
    assert make is not None, "make is not installed"
    fake_id = tmp_path / "id"
    fake_id.write_text(f"#!/bin/sh\necho {NON_ROOT_UID}\n")
    fake_id.chmod(0o755)
    result = subprocess.run(
        [make, "--no-print-directory", "-C", str(ROOT), "browser"],
        env={"PATH": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=MAKE_TIMEOUT_S,
    )
    assert result.returncode != 0
    assert result.stdout == ""
    [line, *make_says] = result.stderr.splitlines()
    assert line == "make test needs Debian's chromium: run 'sudo apt-get install -y chromium', then 'make test' again"
    assert all(said.startswith("make: ***") for said in make_says), make_says


def test_make_test_ends_with_the_conformance_tier_which_runs_both_upstream_suites_wrapped() -> None:
    make = shutil.which("make")
    assert make is not None, "make is not installed"
    dry_run = [make, "--no-print-directory", "-n", "-C", str(ROOT), "test"]
    said = subprocess.run(
        dry_run, capture_output=True, text=True, timeout=MAKE_TIMEOUT_S, check=True
    ).stdout.splitlines()
    assert said[-1] == ".venv/bin/python -m tests.conformance.run"
    [sub_make] = [index for index, line in enumerate(said) if line.endswith(" --no-print-directory test-conformance")]
    assert sub_make > said.index(".venv/bin/python -m pytest -q")


def _dry_run(target: str, llama_server_dir: Path) -> list[str]:
    """What `make -n target` would run, with llama-server's folder at `llama_server_dir` (not built yet)."""
    make = shutil.which("make")
    assert make is not None, "make is not installed"
    command = [make, "--no-print-directory", "-n", "-C", str(ROOT), target, f"LLAMA_SERVER_DIR={llama_server_dir}"]
    said = subprocess.run(command, capture_output=True, text=True, timeout=MAKE_TIMEOUT_S, check=True)
    return said.stdout.splitlines()


def test_make_llama_server_builds_the_server_alone_from_the_pinned_sdists_llama_cpp_for_the_cpus_named_features(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "llama-server"
    said = _dry_run("llama-server", folder)
    script = "\n".join(said).replace("\\\n", " ")
    [download] = [line for line in script.splitlines() if " -m pip download " in line]
    assert "--no-deps --no-binary :all:" in download and f"--dest {folder}" in download
    [pin] = re.findall(r"llama-cpp-python==(\S+)", download)
    [unpack] = [line for line in said if line.startswith("tar ")]
    assert f"{folder}/llama_cpp_python-{pin}.tar.gz" in unpack
    assert unpack.endswith(f"llama_cpp_python-{pin}/vendor/llama.cpp")
    [configure] = [line for line in said if line.startswith("cmake -S ")]
    assert "-DLLAMA_BUILD_SERVER=ON" in configure and "-DLLAMA_BUILD_TESTS=OFF" in configure
    assert "-DLLAMA_BUILD_EXAMPLES=OFF" in configure and "-DGGML_NATIVE=OFF" in configure
    assert "AMX" not in configure  # the native build's AMX path segfaulted on the SmolLM2 file (the Makefile's comment)
    flags = set(Path("/proc/cpuinfo").read_text().split())
    for feature, option in CPU_FEATURE_OPTIONS.items():
        assert (option in configure) == (feature in flags), (feature, configure)
    [build] = [line for line in said if line.startswith("cmake --build ")]
    assert build == f"cmake --build {folder}/build --target llama-server -j 2"


def test_make_bench_builds_llama_server_and_make_test_does_not(tmp_path: Path) -> None:
    folder = tmp_path / "llama-server"
    assert f"cmake --build {folder}/build --target llama-server -j 2" in _dry_run("bench", folder)
    assert not [line for line in _dry_run("test", folder) if str(folder) in line or "cmake" in line]
