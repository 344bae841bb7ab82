"""Fixtures for the simulator's own tests: the simulator and real clients pointed at it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anthropic
import openai
import pytest

from tests.simulator import ProviderSimulator
from tests.simulator.fixtures import simulator  # noqa: F401  (re-exported fixture)

from .clients import REPLY, resolve

KEY = "sk-simulator"


@pytest.fixture
def sim(simulator: ProviderSimulator) -> ProviderSimulator:  # noqa: F811
    simulator.reply = REPLY
    return simulator


@pytest.fixture
def is_async() -> bool:
    """Sync clients unless a test parametrises `is_async`."""
    return False


@pytest.fixture
async def oai(sim: ProviderSimulator, is_async: bool) -> AsyncIterator[Any]:
    cls = openai.AsyncOpenAI if is_async else openai.OpenAI
    client = cls(base_url=sim.openai_base_url, api_key=KEY, max_retries=0)
    yield client
    await resolve(client.close())


@pytest.fixture
async def claude(sim: ProviderSimulator, is_async: bool) -> AsyncIterator[Any]:
    cls = anthropic.AsyncAnthropic if is_async else anthropic.Anthropic
    client = cls(base_url=sim.anthropic_base_url, api_key=KEY, max_retries=0)
    yield client
    await resolve(client.close())
