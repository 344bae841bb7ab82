"""`sdk.compat`: the release check at `wrap()` time, and the clients' retry conventions kept by kvwise's retries."""

from __future__ import annotations

import subprocess
import sys

import anthropic
import openai
import pytest
from openai import _models as openai_models
from openai import _types as openai_types

import sdk
from sdk import compat
from tests.sdk.helpers import resolve

USER = [{"role": "user", "content": "hi"}]


@pytest.fixture
def fresh_release_check():
    compat._check_release.cache_clear()
    yield
    compat._check_release.cache_clear()


@pytest.mark.usefixtures("fresh_release_check")
def test_wrap_refuses_a_client_release_it_does_not_know_naming_the_supported_ones(monkeypatch):
    monkeypatch.setattr(openai, "__version__", "4.0.0")
    with pytest.raises(compat.UnsupportedClient, match=r"supports openai 3\.x .*the installed openai is 4\.0\.0"):
        sdk.wrap(openai.OpenAI(api_key="k"))


@pytest.mark.usefixtures("fresh_release_check")
def test_wrap_refuses_a_release_that_lacks_a_private_part_kvwise_relies_on(monkeypatch):
    monkeypatch.delitem(openai_types.RequestOptions.__annotations__, "max_retries")
    with pytest.raises(compat.UnsupportedClient, match="lacks RequestOptions.max_retries"):
        sdk.wrap(openai.OpenAI(api_key="k"))


@pytest.mark.usefixtures("fresh_release_check")
def test_wrap_refuses_a_release_whose_request_options_lack_what_the_lower_level_road_reads(monkeypatch):
    fields = dict(openai_models.FinalRequestOptions.model_fields)
    del fields["json_data"]
    monkeypatch.setattr(openai_models.FinalRequestOptions, "model_fields", fields)
    with pytest.raises(compat.UnsupportedClient, match="lacks FinalRequestOptions.json_data"):
        sdk.wrap(openai.OpenAI(api_key="k"))


def test_wrapping_an_anthropic_client_never_imports_openai():
    code = "import sys, anthropic, sdk; sdk.wrap(anthropic.Anthropic(api_key='k')); print('openai' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip() == "False"


def test_the_release_error_is_a_type_error_as_for_any_unsupported_client():
    with pytest.raises(TypeError, match="openai 3.x"):
        sdk.wrap(object())


async def test_each_sdk_retry_carries_its_attempt_number_in_x_stainless_retry_count(simulator, openai_client):
    simulator.fail(500, times=2, headers={"retry-after-ms": "1"})
    await resolve(sdk.wrap(openai_client).chat.completions.create(model="m", messages=USER))
    assert [request.headers["x-stainless-retry-count"] for request in simulator.requests] == ["0", "1", "2"]


async def test_x_should_retry_false_stops_the_retry_of_a_500(simulator, anthropic_client):
    simulator.fail(500, headers={"x-should-retry": "false"})
    with pytest.raises(anthropic.InternalServerError):
        await resolve(sdk.wrap(anthropic_client).messages.create(model="claude-sonnet-4-6", max_tokens=8, messages=USER))
    assert len(simulator.requests) == 1


async def test_x_should_retry_true_retries_an_error_the_sdk_would_not_retry(simulator, openai_client):
    simulator.fail(400, headers={"x-should-retry": "true"})
    response = await resolve(sdk.wrap(openai_client).chat.completions.create(model="m", messages=USER))
    assert response.choices[0].message.content == simulator.reply
    assert len(simulator.requests) == 2
