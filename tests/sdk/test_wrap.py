"""sdk.wrap end to end: the real clients over loopback against the provider simulator."""

from __future__ import annotations

import datetime
import importlib
import json
import pkgutil
import subprocess
import sys
import uuid
from typing import Any

import anthropic
import openai
import pytest

import sdk
from tests.sdk.helpers import LONG_SYSTEM, collect, resolve


def _volatile_system() -> tuple[str, str]:
    request_id = str(uuid.uuid4())
    stamp = datetime.datetime.now(datetime.UTC).isoformat()
    return request_id, f"Request ID: {request_id}\nCurrent time: {stamp}\n{LONG_SYSTEM}"


def _cached(response: Any) -> int:
    return response.usage.prompt_tokens_details.cached_tokens or 0


async def test_wrapped_calls_hit_the_cache_when_the_system_prompt_starts_with_a_fresh_uuid(simulator, openai_client):
    wrapped = sdk.wrap(openai_client)
    cached, ids = [], []
    for _ in range(4):
        request_id, system = _volatile_system()
        ids.append(request_id)
        response = await resolve(
            wrapped.chat.completions.create(
                model="gpt-5.4", messages=[{"role": "system", "content": system}, {"role": "user", "content": "Hi"}]
            )
        )
        assert isinstance(response, openai.types.chat.ChatCompletion)
        cached.append(_cached(response))
    assert cached[0] == 0 and min(cached[1:]) >= 1024  # the id moved on first sight: from the second call on, a hit
    for request_id, recorded in zip(ids, simulator.requests):
        assert request_id in json.dumps(recorded.body["messages"][-1])  # moved, not dropped: the note, last
        assert request_id not in json.dumps(recorded.body["messages"][0])


async def test_unwrapped_calls_miss_the_cache_when_the_system_prompt_starts_with_a_fresh_uuid(openai_client):
    cached = []
    for _ in range(3):
        _, system = _volatile_system()
        response = await resolve(
            openai_client.chat.completions.create(
                model="gpt-5.4", messages=[{"role": "system", "content": system}, {"role": "user", "content": "Hi"}]
            )
        )
        cached.append(_cached(response))
    assert cached == [0, 0, 0]


async def test_shuffled_tool_lists_reach_the_server_as_identical_bytes(simulator, openai_client):
    import random

    tools = [
        {
            "type": "function",
            "function": {
                "name": name,
                "description": f"Tool {name}.",
                "parameters": {
                    "type": "object",
                    "properties": {"x": {"type": "string"}, "a": {"type": "integer"}},
                    "required": ["x", "a"],
                },
            },
        }
        for name in ("search", "fetch", "add", "zip", "lookup")
    ]
    wrapped = sdk.wrap(openai_client)
    rng = random.Random(7)
    for _ in range(5):
        shuffled = [dict(reversed(list(tool.items()))) if rng.random() < 0.5 else tool for tool in tools]
        rng.shuffle(shuffled)
        await resolve(
            wrapped.chat.completions.create(model="m", messages=[{"role": "user", "content": "go"}], tools=shuffled)
        )
    sent = [json.dumps(request.body["tools"]) for request in simulator.requests]
    assert len(set(sent)) == 1
    assert [tool["function"]["name"] for tool in simulator.requests[0].body["tools"]] == [
        "add",
        "fetch",
        "lookup",
        "search",
        "zip",
    ]


async def test_other_attributes_pass_through_to_the_wrapped_client(openai_client):
    wrapped = sdk.wrap(openai_client)
    models = await resolve(wrapped.models.list())
    assert wrapped.api_key == "test-key"
    assert models is not None
    assert wrapped.base_url == openai_client.base_url


async def test_with_options_returns_a_wrapped_client(simulator, openai_client):
    wrapped = sdk.wrap(openai_client, sdk.Policy(max_output_tokens=33)).with_options(timeout=5.0)
    await resolve(wrapped.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}]))
    assert simulator.requests[-1].body["max_completion_tokens"] == 33


async def test_streams_are_the_clients_own_types(simulator, openai_client, anthropic_client, mode):
    chat = await resolve(
        sdk.wrap(openai_client).chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}], stream=True
        )
    )
    assert isinstance(chat, openai.Stream if mode == "sync" else openai.AsyncStream)
    events = await collect(chat)
    assert events[-1].choices[0].finish_reason == "stop"
    message = await resolve(
        sdk.wrap(anthropic_client).messages.create(
            model="claude-sonnet-4-6", messages=[{"role": "user", "content": "hi"}], stream=True
        )
    )
    assert isinstance(message, anthropic.Stream if mode == "sync" else anthropic.AsyncStream)
    kinds = [event.type for event in await collect(message)]
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"


async def test_responses_api_is_intercepted_streamed_and_not(simulator, openai_client):
    wrapped = sdk.wrap(openai_client, sdk.Policy(max_output_tokens=50))
    response = await resolve(wrapped.responses.create(model="gpt-4.1", input="Say hi", instructions="Be brief."))
    assert isinstance(response, openai.types.responses.Response)
    assert response.output_text == simulator.reply
    assert simulator.requests[-1].body["max_output_tokens"] == 50
    stream = await resolve(wrapped.responses.create(model="gpt-5.4", input="Say hi", stream=True))
    events = await collect(stream)
    assert events[-1].type == "response.completed"


def test_messages_stream_helper_keeps_working_through_the_proxy(simulator):
    client = sdk.wrap(anthropic.Anthropic(base_url=simulator.anthropic_base_url, api_key="k", max_retries=0))
    with client.messages.stream(
        model="claude-sonnet-4-6", max_tokens=64, messages=[{"role": "user", "content": "hi"}]
    ) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == simulator.reply
    assert final.stop_reason == "end_turn"


async def test_async_messages_stream_helper_keeps_working_through_the_proxy(simulator):
    client = sdk.wrap(anthropic.AsyncAnthropic(base_url=simulator.anthropic_base_url, api_key="k", max_retries=0))
    async with client.messages.stream(
        model="claude-sonnet-4-6", max_tokens=64, messages=[{"role": "user", "content": "hi"}]
    ) as stream:
        text = "".join([chunk async for chunk in stream.text_stream])
        final = await stream.get_final_message()
    assert text == simulator.reply
    assert final.stop_reason == "end_turn"


def test_wrap_rejects_what_is_not_a_supported_client():
    with pytest.raises(TypeError, match=r"openai 1\.40 to 3\.x .* or anthropic 0\.40 to 2\.x"):
        sdk.wrap(object())


def test_importing_sdk_does_not_import_torch():
    code = "import sys, sdk; sdk.wrap; print('torch' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"


def test_an_openai_app_never_imports_anthropic_and_its_cut_stream_raises_what_the_bare_client_raises_as_stream_truncated():  # noqa: E501 (the name states the claim it tests)
    """Importing anthropic costs an openai app seconds and ~130,000 objects: kvwise must not do it."""
    code = """
import sys, openai, sdk
from openai import _base_client
http = getattr(_base_client, "httpx2", None) or _base_client.httpx  # what the installed client sends with
chunk = b'data: {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m", ' \\
        b'"choices": [{"index": 0, "delta": {"content": "hi"}, "finish_reason": null}]}\\n\\n'
class Broken(http.SyncByteStream):
    def __iter__(self):
        yield chunk
        raise http.RemoteProtocolError("peer closed connection without sending complete message body")
answer = lambda request: http.Response(200, headers={"content-type": "text/event-stream"}, stream=Broken())
bare = openai.OpenAI(base_url="http://test/v1", api_key="k", http_client=http.Client(transport=http.MockTransport(answer)))
try:
    list(sdk.wrap(bare).chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], stream=True))
except (openai.APIConnectionError, http.RemoteProtocolError) as error:  # as the installed bare client raises it
    print(isinstance(error, sdk.StreamTruncated), "anthropic" in sys.modules)
"""  # noqa: E501 (the program the child process runs, kept as it reads)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.split() == ["True", "False"]


def test_public_surface_is_exactly_the_documented_names():
    assert sdk.__all__ == sorted(sdk.__all__)
    assert set(sdk.__all__) == {
        "Finding",
        "KvwiseError",
        "Middleware",
        "Policy",
        "Prompt",
        "StreamTruncated",
        "UnsupportedClient",
        "conversation",
        "lint",
        "wrap",
    }


def test_every_exception_the_sdk_defines_is_exported_where_its_users_import_from():
    """An error a caller may catch is reachable as `sdk.<Name>` (the report's as `sdk.report.<Name>`)."""
    import sdk.report

    missing = []
    for info in pkgutil.walk_packages(sdk.__path__, "sdk."):
        if info.name.endswith("__main__"):
            continue  # a command line, which runs on import
        module = importlib.import_module(info.name)
        public = sdk.report if info.name.startswith("sdk.report") else sdk
        for name, value in vars(module).items():
            if (
                isinstance(value, type)
                and issubclass(value, BaseException)
                and value.__module__ == info.name
                and not name.startswith("_")
                and getattr(public, name, None) is not value
            ):
                missing.append(f"{info.name}.{name}")
    assert missing == []


def test_the_wrapped_client_is_a_context_manager_like_the_client(simulator):
    with sdk.wrap(
        openai.OpenAI(base_url=simulator.openai_base_url, api_key="k"), sdk.Policy(max_output_tokens=9)
    ) as client:
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    assert simulator.requests[-1].body["max_completion_tokens"] == 9  # the proxy, not the bare client, was entered
    assert client.is_closed()


async def test_the_wrapped_async_client_is_an_async_context_manager(simulator):
    async with sdk.wrap(anthropic.AsyncAnthropic(base_url=simulator.anthropic_base_url, api_key="k")) as client:
        await client.messages.create(
            model="claude-sonnet-4-6", max_tokens=8, messages=[{"role": "user", "content": "hi"}]
        )
    assert client.is_closed()


async def test_copy_returns_a_wrapped_client_like_with_options(simulator, openai_client):
    wrapped = sdk.wrap(openai_client, sdk.Policy(max_output_tokens=33)).copy(timeout=5.0)
    await resolve(wrapped.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}]))
    assert simulator.requests[-1].body["max_completion_tokens"] == 33


async def test_an_api_key_or_base_url_set_after_wrapping_is_used_by_the_next_call(simulator, mode):
    cls = openai.OpenAI if mode == "sync" else openai.AsyncOpenAI
    client = cls(base_url="http://127.0.0.1:9/v1", api_key="old", max_retries=0)  # nothing listens on port 9
    wrapped = sdk.wrap(client)
    client.base_url = simulator.openai_base_url
    client.api_key = "rotated"
    await resolve(wrapped.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}]))
    assert simulator.requests[-1].headers["authorization"] == "Bearer rotated"
    wrapped.api_key = "set-on-the-proxy"
    assert client.api_key == "set-on-the-proxy"
    await resolve(wrapped.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}]))
    assert simulator.requests[-1].headers["authorization"] == "Bearer set-on-the-proxy"


def test_the_wrapped_client_passes_isinstance_checks_for_the_clients_class(openai_client):
    assert isinstance(sdk.wrap(openai_client), type(openai_client))


_TOOLS = [{"name": n, "description": n, "input_schema": {"type": "object"}} for n in ("zeta", "alpha")]


def _platform_client(name: str, mode: str, simulator: Any) -> Any:
    prefix = "" if mode == "sync" else "Async"
    if name == "Bedrock":
        return getattr(anthropic, f"{prefix}AnthropicBedrock")(
            base_url=simulator.anthropic_base_url, aws_region="us-east-1", api_key="k"
        )
    if name == "Vertex":
        cls = getattr(anthropic, f"{prefix}AnthropicVertex")
        return cls(base_url=simulator.anthropic_base_url, region="us-east5", project_id="p", access_token="t")
    if name == "Foundry":
        return getattr(anthropic, f"{prefix}AnthropicFoundry")(base_url=simulator.anthropic_base_url, api_key="k")
    cls = getattr(openai, f"{prefix}AzureOpenAI")
    return cls(base_url=f"{simulator.openai_base_url}/deployments/gpt-4.1", api_key="k", api_version="2024-10-21")


@pytest.mark.parametrize("platform", ["Bedrock", "Vertex", "Foundry", "Azure"])
async def test_the_cloud_platform_clients_are_wrapped_and_intercepted(simulator, mode, platform):
    wrapped = sdk.wrap(_platform_client(platform, mode, simulator), sdk.Policy(max_output_tokens=21))
    if platform == "Azure":
        tools = [
            {"type": "function", "function": {"name": tool["name"], "parameters": tool["input_schema"]}}
            for tool in _TOOLS
        ]
        response = await resolve(
            wrapped.chat.completions.create(model="gpt-4.1", messages=[{"role": "user", "content": "hi"}], tools=tools)
        )
        assert response.choices[0].message.content == simulator.reply
        assert [tool["function"]["name"] for tool in simulator.requests[-1].body["tools"]] == ["alpha", "zeta"]
        assert simulator.requests[-1].body["max_completion_tokens"] == 21
        return
    message = await resolve(
        wrapped.messages.create(model="claude-sonnet-4-6", messages=[{"role": "user", "content": "hi"}], tools=_TOOLS)
    )
    assert message.content[0].text == simulator.reply
    sent = simulator.requests[-1]
    assert [tool["name"] for tool in sent.body["tools"]] == ["alpha", "zeta"]
    assert sent.body["max_tokens"] == 21
    assert sent.path != "/v1/messages" if platform in ("Bedrock", "Vertex") else sent.path == "/v1/messages"


async def test_a_vertex_stream_and_token_count_go_through_kvwise(simulator, mode):
    wrapped = sdk.wrap(_platform_client("Vertex", mode, simulator), sdk.Policy(max_output_tokens=21))
    stream = await resolve(
        wrapped.messages.create(model="claude-sonnet-4-6", messages=[{"role": "user", "content": "hi"}], stream=True)
    )
    kinds = [event.type for event in await collect(stream)]
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    assert simulator.requests[-1].path.endswith(":streamRawPredict")
    assert simulator.requests[-1].body["max_tokens"] == 21
    count = await resolve(
        wrapped.messages.count_tokens(
            model="claude-sonnet-4-6", messages=[{"role": "user", "content": "hi"}], tools=_TOOLS
        )
    )
    assert count.input_tokens > 0
    assert [tool["name"] for tool in simulator.requests[-1].body["tools"]] == ["alpha", "zeta"]
    assert "max_tokens" not in simulator.requests[-1].body


async def test_the_raw_response_of_a_stream_parses_to_the_kvwise_guarded_stream(
    simulator, openai_client, anthropic_client
):
    simulator.loop("I keep saying the same thing over and over. ")
    chat = sdk.wrap(openai_client).chat.completions.with_raw_response
    raw = await resolve(chat.create(model="m", messages=[{"role": "user", "content": "hi"}], stream=True))
    events = await collect(raw.parse())
    assert events[-1].choices[0].finish_reason == "length"  # the loop guard cut it, not the server's cap
    messages = sdk.wrap(anthropic_client).messages.with_raw_response
    raw = await resolve(
        messages.create(
            model="claude-sonnet-4-6", max_tokens=4000, messages=[{"role": "user", "content": "hi"}], stream=True
        )
    )
    events = await collect(await resolve(raw.parse()))
    assert [event.delta.stop_reason for event in events if event.type == "message_delta"] == ["max_tokens"]
    assert all(stream.client_closed for stream in simulator.streams)
