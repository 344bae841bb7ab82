"""Fixtures of the framework conformance suite: the scripted simulator and the real local server.

The frameworks are imported with their phone-home switched off: openai-agents would export its own
traces to OpenAI, and LiteLLM would fetch its model price map from the network at import.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

os.environ.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import anthropic  # noqa: E402
import httpx2  # noqa: E402
import openai  # noqa: E402
import pytest  # noqa: E402

pytest.register_assert_rewrite("tests.frameworks.conformance")

from tests.frameworks.scripted import ScriptedSimulator  # noqa: E402
from tests.local_backend.serving import Served, served_engine, wait_idle  # noqa: E402
from tests.simulator.records import RecordedRequest  # noqa: E402


@pytest.fixture(params=[True, False], ids=["later-conversation", "first-conversation"])
def earlier_conversation(request: pytest.FixtureRequest) -> bool:
    """Whether the wrapped client served a conversation under another request ID before the
    measured one (kvwise then moves the ID from the first call), or the measured one is its first."""
    return bool(request.param)


@pytest.fixture
def sim() -> Iterator[ScriptedSimulator]:
    with ScriptedSimulator() as simulator:
        yield simulator


class LocalServer:
    """The local backend serving the bundled model, and what its clients sent it.

    `reset` empties its prefix cache, so each run of a pair starts cold. The server keeps no record
    of requests, so its clients send through an `httpx2` client whose request hook records each one
    as it goes on the wire (after kvwise, for a wrapped client).
    """

    def __init__(self, served: Served) -> None:
        self.url = served.url
        self._engine = served.engine
        self._requests: list[RecordedRequest] = []

    @property
    def requests(self) -> list[RecordedRequest]:
        return list(self._requests)

    def reset(self) -> None:
        """Forget the requests and the prefix cache, once nothing runs (as the simulator's `reset`)."""
        wait_idle(self._engine)
        self._engine.reset_prefix_cache()
        self._requests.clear()

    def _record(self, request: httpx2.Request) -> None:
        raw = request.read()
        body = json.loads(raw) if raw else None
        headers = {name.lower(): value for name, value in request.headers.items()}
        self._requests.append(RecordedRequest(request.method, request.url.path, headers, body, raw))

    async def _record_async(self, request: httpx2.Request) -> None:
        self._record(request)

    def openai(self, *, sync: bool = False) -> Any:
        if sync:
            return openai.OpenAI(
                base_url=f"{self.url}/v1",
                api_key="local",
                max_retries=0,
                http_client=httpx2.Client(event_hooks={"request": [self._record]}),
            )
        return openai.AsyncOpenAI(
            base_url=f"{self.url}/v1",
            api_key="local",
            max_retries=0,
            http_client=httpx2.AsyncClient(event_hooks={"request": [self._record_async]}),
        )

    def anthropic(self, *, sync: bool = False) -> Any:
        if sync:
            return anthropic.Anthropic(
                base_url=self.url,
                api_key="local",
                max_retries=0,
                http_client=httpx2.Client(event_hooks={"request": [self._record]}),
            )
        return anthropic.AsyncAnthropic(
            base_url=self.url,
            api_key="local",
            max_retries=0,
            http_client=httpx2.AsyncClient(event_hooks={"request": [self._record_async]}),
        )


@pytest.fixture(scope="session")
def local() -> Iterator[LocalServer]:
    """The bundled model behind the real server, once for the suite (its prefix cache included)."""
    with served_engine("default") as served:
        yield LocalServer(served)
