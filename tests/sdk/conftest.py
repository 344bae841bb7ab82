"""Fixtures of the SDK tests: real clients, sync and async, pointed at the provider simulator.

The clients keep their default `max_retries`: a caller who set none, so a wrapped one's own retry
loop makes `Policy.retries` retries (a `max_retries` of the caller's own stands).
"""

from __future__ import annotations

from typing import Any

import anthropic
import openai
import pytest


@pytest.fixture(params=["sync", "async"])
def mode(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def openai_client(simulator: Any, mode: str) -> Any:
    cls = openai.OpenAI if mode == "sync" else openai.AsyncOpenAI
    return cls(base_url=simulator.openai_base_url, api_key="test-key")


@pytest.fixture
def anthropic_client(simulator: Any, mode: str) -> Any:
    cls = anthropic.Anthropic if mode == "sync" else anthropic.AsyncAnthropic
    return cls(base_url=simulator.anthropic_base_url, api_key="test-key")
