"""The conformance plugin on a suite of three tests: every client the tests build is wrapped, a test
given a bare client fails, and the sentinel test passes only where the wrapping is real."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conformance.kvwise_wrap_plugin import SENTINEL
from tests.conformance.run import pytest

SUITE = """
import json

import httpx2
import openai
import pytest

SENT = []


def answer(request):
    SENT.append(json.loads(request.content))
    completion = {"id": "c", "object": "chat.completion", "created": 0, "model": "m", "choices": []}
    return httpx2.Response(200, json=completion)


def tools(*names):
    return [{"type": "function", "function": {"name": name, "parameters": {"type": "object"}}} for name in names]


@pytest.fixture
def async_client():
    return openai.AsyncOpenAI(api_key="k", http_client=httpx2.AsyncClient(transport=httpx2.MockTransport(answer)))


@pytest.fixture
def smuggled():
    client = object.__new__(openai.OpenAI)  # past the class's construction, as no test should
    openai.OpenAI.__init__(client, api_key="k")
    return client


def test_a_client_built_by_the_test_sends_through_kvwise():
    client = openai.OpenAI(api_key="k", http_client=httpx2.Client(transport=httpx2.MockTransport(answer)))
    assert isinstance(client, openai.OpenAI)
    client.with_options(max_retries=0).chat.completions.create(model="gpt-4o", messages=[], tools=tools("b", "a"))
    assert [tool["function"]["name"] for tool in SENT[-1]["tools"]] == ["a", "b"]


async def test_an_async_client_built_by_a_fixture_sends_through_kvwise(async_client):
    await async_client.chat.completions.create(model="gpt-4o", messages=[], tools=tools("b", "a"))
    assert [tool["function"]["name"] for tool in SENT[-1]["tools"]] == ["a", "b"]


def test_a_bare_client_handed_to_the_test(smuggled):
    assert smuggled.api_key == "k"
"""


def _run(tmp_path: Path, *, bare: bool) -> dict:
    folder = tmp_path / "openai-0.0.0"  # named as an unpacked sdist, which tells the plugin the package
    (folder / "tests").mkdir(parents=True)
    (folder / "tests" / "test_suite.py").write_text(SUITE)
    results = tmp_path / "results.json"
    pytest(
        folder,
        ["-q", "-o", "asyncio_mode=auto", "-o", "asyncio_default_fixture_loop_scope=function"],
        bare=bare,
        results=results,
    )
    return json.loads(results.read_text())


def test_wrapped_every_client_built_is_wrapped_and_a_test_handed_a_bare_one_fails(tmp_path: Path) -> None:
    outcome = _run(tmp_path, bare=False)
    assert list(outcome["failed"]) == ["tests/test_suite.py::test_a_bare_client_handed_to_the_test"]
    assert (
        "the test was handed a bare client: fixture smuggled"
        in outcome["failed"]["tests/test_suite.py::test_a_bare_client_handed_to_the_test"]
    )
    assert outcome["passed"] == 3  # the two tests of wrapped clients and the sentinel


def test_bare_the_clients_stay_bare_and_there_is_no_sentinel(tmp_path: Path) -> None:
    outcome = _run(tmp_path, bare=True)
    assert sorted(outcome["failed"]) == [
        "tests/test_suite.py::test_a_client_built_by_the_test_sends_through_kvwise",
        "tests/test_suite.py::test_an_async_client_built_by_a_fixture_sends_through_kvwise",
    ]
    assert outcome["passed"] == 1
    assert SENTINEL not in outcome["failed"]
