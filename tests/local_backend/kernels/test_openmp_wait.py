"""`local_backend` chooses libgomp's spin before torch loads, and keeps what the user or an earlier torch chose."""

import os
import subprocess
import sys

import pytest

from local_backend.kernels.openmp_wait import SPIN_COUNT

PRINT_SPIN = "import os; print(os.environ.get('GOMP_SPINCOUNT'))"


def spin_seen(code: str, **env: str) -> str:
    """What `GOMP_SPINCOUNT` a fresh interpreter holds after running `code`, with `env` added to a clean one."""
    base = {name: value for name, value in os.environ.items() if name not in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")}
    done = subprocess.run([sys.executable, "-c", code], env={**base, **env}, capture_output=True, text=True, check=True)
    return done.stdout.strip()


def test_importing_the_backend_first_sets_the_spin_for_torch_and_child_processes() -> None:
    code = f"import local_backend, torch, subprocess, sys; subprocess.run([sys.executable, '-c', {PRINT_SPIN!r}])"
    assert spin_seen(code) == SPIN_COUNT


@pytest.mark.parametrize("env", [{"GOMP_SPINCOUNT": "7"}, {"OMP_WAIT_POLICY": "ACTIVE"}], ids=["spin", "policy"])
def test_a_users_own_openmp_choice_is_kept(env: dict[str, str]) -> None:
    assert spin_seen(f"import local_backend; {PRINT_SPIN}", **env) == env.get("GOMP_SPINCOUNT", "None")


def test_after_torch_has_loaded_nothing_is_set_that_could_no_longer_take_effect() -> None:
    assert spin_seen(f"import torch, local_backend; {PRINT_SPIN}") == "None"
