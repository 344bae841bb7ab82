"""pytest fixtures; import them into a conftest: `from tests.simulator.fixtures import simulator`."""

from collections.abc import Iterator

import pytest

from .simulator import ProviderSimulator


@pytest.fixture
def simulator() -> Iterator[ProviderSimulator]:
    """A fresh simulator per test, started on a free loopback port and stopped afterwards."""
    with ProviderSimulator() as sim:
        yield sim
