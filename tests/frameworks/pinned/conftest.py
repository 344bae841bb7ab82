"""The frameworks that pin older clients (issue 53), each run in a venv `make test-frameworks` builds.

Their packages live only in those venvs (tests/compat_venv.py), so the project venv's run collects
none of these modules: `make test-frameworks` sets `PINNED_ENV` and names the modules of each venv.
The frameworks' phone-home is switched off before they are imported: CrewAI's telemetry and traces,
LiteLLM's fetch of its model price map.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

os.environ.setdefault("CREWAI_DISABLE_TELEMETRY", "true")
os.environ.setdefault("CREWAI_TRACING_ENABLED", "false")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import pytest  # noqa: E402

from tests.frameworks.pinned.reading import PINNED_ENV, ReadingSimulator  # noqa: E402

collect_ignore_glob = [] if os.environ.get(PINNED_ENV) else ["test_*.py"]


@pytest.fixture
def sim() -> Iterator[ReadingSimulator]:
    with ReadingSimulator() as simulator:
        yield simulator
