"""Fixtures for the simulator's own tests: the simulator and real clients pointed at it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anthropic
import openai
import pytest

from tests.sdk.helpers import resolve
from tests.simulator import ProviderSimulator
from tests.simulator.fixtures import simulator  # noqa: F401  (re-exported fixture)
from tests.simulator_tests import REPLY

KEY = "sk-simulator"


@pytest.fixture
def sim(simulator: ProviderSimulator) -> ProviderSimulator:  # noqa: F811
    simulator.reply = REPLY
    return simulator


@pytest.fixture
def mode() -> str:
    """Sync clients unless a test parametrises `mode` ("sync" or "async")."""
    return "sync"


@pytest.fixture
async def oai(sim: ProviderSimulator, mode: str) -> AsyncIterator[Any]:
    cls = openai.AsyncOpenAI if mode == "async" else openai.OpenAI
    client = cls(base_url=sim.openai_base_url, api_key=KEY, max_retries=0)
    yield client
    await resolve(client.close())


@pytest.fixture
async def claude(sim: ProviderSimulator, mode: str) -> AsyncIterator[Any]:
    cls = anthropic.AsyncAnthropic if mode == "async" else anthropic.Anthropic
    client = cls(base_url=sim.anthropic_base_url, api_key=KEY, max_retries=0)
    yield client
    await resolve(client.close())
