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
@pytest.mark.parametrize("version", ["0.28.1", "1.39.0", "4.0.0"])
def test_wrap_refuses_a_client_release_outside_the_range_naming_the_range(monkeypatch, version):
    monkeypatch.setattr(openai, "__version__", version)
    with pytest.raises(
        compat.UnsupportedClient,
        match=rf"supports openai 1\.40 to 3\.x .*the installed openai is {version}: install openai>=1\.40,<4",
    ):
        sdk.wrap(openai.OpenAI(api_key="k"))


@pytest.mark.usefixtures("fresh_release_check")
@pytest.mark.parametrize(
    ("package", "version"),
    [("openai", "1.40.0"), ("openai", "2.54.0"), ("anthropic", "0.40.0"), ("anthropic", "1.17.0")],
)
def test_wrap_takes_every_release_in_the_range_that_has_the_parts_it_relies_on(monkeypatch, package, version):
    module = {"openai": openai, "anthropic": anthropic}[package]
    monkeypatch.setattr(module, "__version__", version)
    client = openai.OpenAI(api_key="k") if package == "openai" else anthropic.Anthropic(api_key="k")
    assert isinstance(sdk.wrap(client), type(client))


@pytest.mark.usefixtures("fresh_release_check")
async def test_a_release_whose_request_options_have_no_raw_content_field_is_wrapped_and_its_lower_level_posts_are_routed(  # noqa: E501 (the name states the claim it tests)
    monkeypatch, simulator, openai_client
):
    fields = {
        name: field for name, field in openai_models.FinalRequestOptions.model_fields.items() if name != "content"
    }
    monkeypatch.setattr(openai_models.FinalRequestOptions, "model_fields", fields)
    wrapped = sdk.wrap(openai_client)
    options = openai_models.FinalRequestOptions.construct(
        method="post", url="/chat/completions", json_data={"model": "m", "messages": USER}
    )
    answer = await resolve(wrapped.request(openai.types.chat.ChatCompletion, options))
    assert answer.choices[0].message.content == simulator.reply
    assert simulator.requests[-1].body["max_completion_tokens"] == sdk.Policy().max_output_tokens


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
    assert (
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
        == "False"
    )


def test_the_release_error_is_a_type_error_as_for_any_unsupported_client():
    with pytest.raises(TypeError, match=r"openai 1\.40 to 3\.x"):
        sdk.wrap(object())


async def test_each_sdk_retry_carries_its_attempt_number_in_x_stainless_retry_count(simulator, openai_client):
    simulator.fail(500, times=2, headers={"retry-after-ms": "1"})
    await resolve(sdk.wrap(openai_client).chat.completions.create(model="m", messages=USER))
    assert [request.headers["x-stainless-retry-count"] for request in simulator.requests] == ["0", "1", "2"]


async def test_x_should_retry_false_stops_the_retry_of_a_500(simulator, anthropic_client):
    simulator.fail(500, headers={"x-should-retry": "false"})
    with pytest.raises(anthropic.InternalServerError):
        await resolve(
            sdk.wrap(anthropic_client).messages.create(model="claude-sonnet-4-6", max_tokens=8, messages=USER)
        )
    assert len(simulator.requests) == 1


async def test_x_should_retry_true_retries_an_error_the_sdk_would_not_retry(simulator, openai_client):
    simulator.fail(400, headers={"x-should-retry": "true"})
    response = await resolve(sdk.wrap(openai_client).chat.completions.create(model="m", messages=USER))
    assert response.choices[0].message.content == simulator.reply
    assert len(simulator.requests) == 2


def test_a_request_keeps_the_callers_extra_body_apart_and_gives_back_posts_arguments_as_given():
    options = openai._base_client.make_request_options(extra_body={"seed": 1}, extra_headers={"x-a": "1"}, timeout=5)
    given = {"cast_to": object, "body": {"model": "m"}, "options": options, "stream": False}
    request = compat.Request.of_post("/chat/completions", given)
    assert request.extra == {"seed": 1} and "extra_json" not in (request.options or {})
    assert request.send_kwargs() == given
    assert request.keywords() == {"model": "m", "extra_body": {"seed": 1}}
    rewritten = request.with_keywords({"model": "n", "extra_body": {"seed": 2}})
    assert rewritten.send_kwargs()["body"] == {"model": "n"}
    assert rewritten.send_kwargs()["options"]["extra_json"] == {"seed": 2}
    assert request.send_kwargs() == given  # the rewrite is a request of its own


def test_a_sends_options_carry_kvwise_retries_and_trace_headers_in_place_of_the_clients_span():
    given = {"cast_to": object, "body": {}, "options": {"headers": {"a": "1"}, "span_name": "chat"}}
    request = compat.Request.of_post("/v1/messages", given)
    sent = request.send_kwargs({"traceparent": "t"}, 4, cast_to=int)
    assert sent["options"] == {"headers": {"a": "1", "traceparent": "t"}, "max_retries": 4} and sent["cast_to"] is int
    assert compat.Request.of_post("/v1/messages", {"cast_to": object}).send_kwargs() == {"cast_to": object}


def test_the_methods_extra_body_is_read_and_merged_over_the_body_in_compat():
    params = {"model": "m", "timeout": 3, "extra_headers": {"a": "b"}, "extra_body": {"seed": 1}}
    assert compat.as_body(params) == {"model": "m", "seed": 1}
    owned = compat.own_extra_body(params)
    assert owned == {"seed": 1} and params["extra_body"] is owned
    assert compat.extra_body_of({"extra_body": "not a mapping"}) is None and compat.own_extra_body({}) == {}
    assert compat.add_to_extra_body(params, "key", "v") and params["extra_body"] == {"seed": 1, "key": "v"}
    assert not compat.add_to_extra_body(params, "key", "w") and params["extra_body"]["key"] == "v"
