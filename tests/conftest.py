"""Shared fixtures (the provider simulator every SDK test talks to over loopback, headless Chromium)
and the suite's tiers.

Tiers are markers, given here by where a test lives or what it uses, so a new test lands in its tier
without anyone remembering to mark it. `make test` runs every tier (CI runs it); `make test-fast`
leaves out the ones that start other programs or take long, for the edit loop:

    integration  real programs beside the suite: Phoenix, Redis, the frameworks' loops on the local server,
                 the examples as a user runs them
    browser      headless Chromium renders a page
    native       the engine's compiled CPU kernels (built on first use)
    slow         a module whose tests take long together (fuzzers, load, parity over many prompts)

Under CI (`CI` set) hypothesis runs derandomized: the same examples every run, so a CI result is
reproducible; locally it keeps exploring new examples.

What a wrapped client learns goes to a file under the user's cache directory by default
(`sdk.memory.sqlite_store`): each test gets a cache directory of its own (`XDG_CACHE_HOME`, which the
processes it starts inherit), so no test writes to the real ~/.cache or reads what another test learnt.
"""

import os
import re
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import settings

from tests.browser import browser  # noqa: F401 (the headless Chromium fixture of the browser tests)
from tests.simulator.fixtures import simulator  # noqa: F401

# No deadline on any run: an example's time is a timed assertion, and a loaded machine fails it.
settings.register_profile("kvwise", deadline=None)
settings.register_profile("ci", parent=settings.get_profile("kvwise"), derandomize=True)
settings.load_profile("ci" if os.environ.get("CI") else "kvwise")


_TESTS = Path(__file__).parent
TIERS: dict[str, tuple[str, ...]] = {
    "integration": ("integration", "frameworks", "examples", "test_makefile.py", "sdk/memory/test_shared_state.py"),
    "native": (
        "local_backend/kernels/test_cpu_kernels.py",
        "local_backend/kernels/test_native_layers.py",
        "local_backend/kernels/test_quantized.py",
    ),
    "slow": (  # the modules with the longest totals in a full run (pytest --durations=0)
        "local_backend/server/test_server_strict_requests.py",
        "local_backend/server/test_server_structured_outputs.py",
        "local_backend/server/test_server_client_inputs.py",
        "local_backend/server/test_server_fuzz.py",
        "local_backend/server/test_server_openapi_fuzz.py",
        "sdk/send/test_stream_lifecycle.py",
        "sdk/send/test_fault_matrix.py",
        "sdk/surface/test_surface_paths.py",
        "sdk/test_typing.py",
        "sdk/test_request_safety.py",
        "test_tiers.py",
        "local_backend/model/test_gguf_parity.py",
        "local_backend/kernels/test_gguf_quantized.py",
        "sdk/memory/test_sqlite_store.py",
        "sdk/prompt/test_real_prompts.py",
        "local_backend/server/test_server_admission.py",
    ),
}
"""Tier -> the paths under tests/ (folders or modules) whose tests are in it."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        where = item.path.relative_to(_TESTS).as_posix()
        for tier, paths in TIERS.items():
            if any(where == path or where.startswith(f"{path}/") for path in paths):
                item.add_marker(tier)
        if "browser" in getattr(item, "fixturenames", ()):
            item.add_marker("browser")


# The native kernels `make venv` compiled stay where they were built: a test's private cache home must not
# make each engine test, and each server it starts, compile them again (minutes on 2 cores).
os.environ.setdefault(
    "KVWISE_KERNEL_CACHE_DIR",
    str(Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kvwise" / "kernels"),
)
_CACHE_HOMES = Path(tempfile.mkdtemp(prefix="kvwise-tests-cache-"))
os.environ["XDG_CACHE_HOME"] = str(_CACHE_HOMES / "collection")  # what runs before the first test


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """A cache directory of the test's own (a hook, not a fixture: hypothesis's tests take no function-scoped
    fixtures)."""
    os.environ["XDG_CACHE_HOME"] = str(_CACHE_HOMES / re.sub(r"[^\w.-]+", "_", item.nodeid)[-200:])


def pytest_unconfigure() -> None:
    shutil.rmtree(_CACHE_HOMES, ignore_errors=True)
