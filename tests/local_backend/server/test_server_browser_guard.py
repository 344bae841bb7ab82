"""Safe by default (issue 42 item 5): with no API key, a web page cannot drive the server. A
`text/plain` POST from `Origin: http://evil.example` with `Host: evil.example` once got 200; now a
foreign Origin or Host is a 403 and a body that is not JSON a 415, in the route's error form, while
the openai and anthropic clients (JSON, Host 127.0.0.1:port) are served as before."""

from __future__ import annotations

import json
from pathlib import Path

import anthropic
import httpx2
import openai
import pytest

from local_backend.server import create_app, serve_in_thread
from tests.local_backend.serving import Served, ServedEngines

CHAT = "/v1/chat/completions"
BODY = json.dumps({"model": "tiny", "max_tokens": 1, "messages": [{"role": "user", "content": "hi"}]})
JSON = {"content-type": "application/json"}
EVIL = "http://evil.example"


@pytest.fixture(scope="module")
def served(serve: ServedEngines, llama_dir: Path) -> Served:
    return serve(llama_dir, max_model_len=64, kv_cache_memory=2**20)


def _post(url: str, headers: dict[str, str], path: str = CHAT) -> httpx2.Response:
    with httpx2.Client(base_url=url) as http:
        return http.post(path, content=BODY.encode(), headers=headers)


def _port(url: str) -> str:
    return url.rsplit(":", 1)[1]


@pytest.mark.parametrize("path", [CHAT, "/v1/messages"])
def test_the_probes_text_plain_post_from_a_foreign_page_and_host_is_refused(served, path):
    response = _post(served.url, {"content-type": "text/plain", "origin": EVIL, "host": "evil.example"}, path)
    assert response.status_code == 403
    body = response.json()
    assert (
        (body["error"]["type"] == "permission_error")
        if path == "/v1/messages"
        else body["error"]["code"] == "forbidden"
    )


def test_a_foreign_origin_is_refused_even_with_json(served):
    response = _post(served.url, {**JSON, "origin": EVIL})
    assert response.status_code == 403 and "--allowed-origins" in response.json()["error"]["message"]


@pytest.mark.parametrize("host", ["evil.example", "evil.example:8000", "127.0.0.1.evil.example", "192.168.1.7"])
def test_a_host_that_is_not_the_servers_own_name_is_refused_without_a_key(served, host):
    response = _post(served.url, {**JSON, "host": host})
    assert response.status_code == 403 and "--allowed-hosts" in response.json()["error"]["message"]


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "LOCALHOST.", "[::1]"])
def test_the_loopback_names_are_served_on_any_port(served, host):
    assert _post(served.url, {**JSON, "host": f"{host}:{_port(served.url)}"}).status_code == 200


@pytest.mark.parametrize(
    "content_type", ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data", None]
)
def test_a_body_that_is_not_sent_as_json_is_a_415(served, content_type):
    response = _post(served.url, {"content-type": content_type} if content_type else {})
    assert response.status_code == 415 and response.json()["error"]["type"] == "invalid_request_error"


def test_json_with_a_charset_is_served(served):
    assert _post(served.url, {"content-type": "Application/JSON; charset=utf-8"}).status_code == 200


def test_health_answers_whatever_the_host(served):
    with httpx2.Client(base_url=served.url) as http:
        assert http.get("/health", headers={"host": "evil.example"}).status_code == 200


def test_the_openai_and_anthropic_clients_are_served(served):
    with openai.OpenAI(base_url=f"{served.url}/v1", api_key="x", max_retries=0) as client:
        chat = client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=1)
    with anthropic.Anthropic(base_url=served.url, api_key="x", max_retries=0) as client:
        message = client.messages.create(model="tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=1)
    assert chat.choices[0].message.role == "assistant" and message.role == "assistant"


def test_allowed_origins_and_hosts_let_those_pages_and_names_in(served):
    app = create_app(
        served.engine,
        model_name="tiny",
        allowed_origins=["http://app.example"],
        allowed_hosts=["app.example", "127.0.0.1"],
    )
    with serve_in_thread(app) as url:
        assert _post(url, {**JSON, "origin": "http://app.example", "host": "app.example"}).status_code == 200
        assert _post(url, {**JSON, "origin": EVIL}).status_code == 403
        assert _post(url, {**JSON, "host": "localhost"}).status_code == 403  # the list replaces the default
        with httpx2.Client(base_url=url) as http:
            preflight = http.options(
                CHAT,
                headers={
                    "origin": "http://app.example",
                    "access-control-request-method": "POST",
                    "access-control-request-headers": "content-type",
                },
            )
        assert preflight.status_code == 200 and preflight.headers["access-control-allow-origin"] == "http://app.example"


def test_with_an_api_key_any_host_is_served_but_never_a_foreign_origin(served):
    with serve_in_thread(create_app(served.engine, model_name="tiny", api_key="k")) as url:
        keyed = {**JSON, "authorization": "Bearer k"}
        assert _post(url, {**keyed, "host": "my-server.lan:8000"}).status_code == 200
        assert _post(url, {**keyed, "origin": EVIL}).status_code == 403
