"""The installed clients' resource trees against `sdk.surface`'s table: a client release that adds a
model-calling method (one that takes a `model`) shows up here as a red test, not as a silent bypass."""

from __future__ import annotations

import inspect
from collections.abc import Iterable, Iterator
from typing import Any

import anthropic
import openai
import pytest
from anthropic import _resource as anthropic_resource
from openai import _resource as openai_resource

import sdk
from sdk import compat, surface
from sdk.call import Api
from sdk.surface import Kind

_RESOURCES = (
    openai_resource.SyncAPIResource,
    openai_resource.AsyncAPIResource,
    anthropic_resource.SyncAPIResource,
    anthropic_resource.AsyncAPIResource,
)
_SKIP = frozenset({"with_raw_response", "with_streaming_response"})

CLIENTS = {
    "OpenAI": lambda: openai.OpenAI(api_key="k", base_url="http://127.0.0.1:9/v1"),
    "AsyncOpenAI": lambda: openai.AsyncOpenAI(api_key="k", base_url="http://127.0.0.1:9/v1"),
    "AzureOpenAI": lambda: openai.AzureOpenAI(
        api_key="k", api_version="2024-10-21", azure_endpoint="https://x.openai.azure.com"
    ),
    "AsyncAzureOpenAI": lambda: openai.AsyncAzureOpenAI(
        api_key="k", api_version="2024-10-21", azure_endpoint="https://x.openai.azure.com"
    ),
    "Anthropic": lambda: anthropic.Anthropic(api_key="k"),
    "AsyncAnthropic": lambda: anthropic.AsyncAnthropic(api_key="k"),
    "AnthropicBedrock": lambda: anthropic.AnthropicBedrock(aws_region="us-east-1", api_key="k"),
    "AsyncAnthropicBedrock": lambda: anthropic.AsyncAnthropicBedrock(aws_region="us-east-1", api_key="k"),
    "AnthropicVertex": lambda: anthropic.AnthropicVertex(region="us-east5", project_id="p", access_token="t"),
    "AsyncAnthropicVertex": lambda: anthropic.AsyncAnthropicVertex(region="us-east5", project_id="p", access_token="t"),
    "AnthropicFoundry": lambda: anthropic.AnthropicFoundry(resource="r", api_key="k"),
    "AsyncAnthropicFoundry": lambda: anthropic.AsyncAnthropicFoundry(resource="r", api_key="k"),
}


def _package(client: Any) -> str:
    return "openai" if isinstance(client, (openai.OpenAI, openai.AsyncOpenAI)) else "anthropic"


def _children(node: Any) -> Iterator[tuple[str, Any]]:
    """The sub-resources of a client or resource: its properties, cached properties and attributes."""
    names = {name for klass in type(node).__mro__ for name in vars(klass)} | set(vars(node))
    for name in sorted(names):
        if name.startswith("_") or name in _SKIP:
            continue
        try:
            value = getattr(node, name)
        except Exception:  # a property that needs credentials the test client lacks
            continue
        if isinstance(value, _RESOURCES):
            yield name, value


def _model_methods(resource: Any) -> Iterator[str]:
    """The resource's public methods that take a `model`: the ones that call a model."""
    for name in dir(type(resource)):
        function = getattr(type(resource), name)
        if not name.startswith("_") and name not in _SKIP and inspect.isfunction(function):
            if "model" in inspect.signature(function).parameters:
                yield name


def _passes_through(package: str, path: tuple[str, ...]) -> bool:
    return any(path[:length] in surface.PASS_THROUGH[package] for length in range(1, len(path) + 1))


def unclassified(client: Any) -> list[str]:
    """Every model-calling method of `client` that is neither intercepted, rebound, run on the wrapped
    client nor passed through, and every resource that is neither on the way to an intercepted one
    nor passed through."""
    package = _package(client)
    missing: list[str] = []

    def walk(node: Any, path: tuple[str, ...]) -> None:
        for name, child in _children(node):
            child_path = (*path, name)
            if _passes_through(package, child_path):
                continue
            if not surface.leads_to_intercepted(package, child_path):
                missing.append(".".join(child_path) + " (resource)")
                continue
            handled = {spec.method for spec in surface.intercepted(package, child_path)}
            handled |= set(surface.on_wrapped_client(package, child_path))
            for method in _model_methods(child):
                full = (*child_path, method)
                if (
                    method not in handled
                    and full not in surface.REBOUND[package]
                    and not _passes_through(package, full)
                ):
                    missing.append(".".join(full))
            walk(child, child_path)

    walk(client, ())
    return missing


@pytest.mark.parametrize("name", sorted(CLIENTS))
def test_every_model_calling_method_of_the_installed_client_is_intercepted_or_passed_through_with_a_reason(name):
    assert unclassified(CLIENTS[name]()) == []


def test_a_new_model_calling_method_would_be_reported():
    client = CLIENTS["OpenAI"]()

    def summarize(self: Any, *, model: str, input: str) -> None: ...

    type(client.chat.completions).summarize = summarize
    try:
        assert unclassified(client) == ["beta.chat.completions.summarize", "chat.completions.summarize"]
    finally:
        del type(client.chat.completions).summarize


@pytest.mark.parametrize("name", sorted(CLIENTS))
def test_every_intercepted_method_of_the_wrapped_client_is_kvwises_own(name):
    client = CLIENTS[name]()
    package = _package(client)
    wrapped = sdk.wrap(client)
    checked = 0
    for path, specs in surface.INTERCEPTED[package].items():
        live, proxy = client, wrapped
        for part in path:
            live, proxy = getattr(live, part, None), getattr(proxy, part, None)
        if live is None:  # Foundry has no batches
            continue
        for spec in (spec for spec in specs if hasattr(live, spec.method)):
            assert getattr(live, spec.method).__self__ is live  # the client's own, bound
            ours = getattr(proxy, spec.method)
            assert ours.__self__ is proxy and ours.__func__ is not getattr(type(live), spec.method)  # kvwise's, bound
            checked += 1
    assert checked >= 5


def _newest(package: str) -> bool:
    """Whether the installed `package` is of the newest major kvwise supports, whose names the table lists."""
    module = {"openai": openai, "anthropic": anthropic}[package]
    return int(module.__version__.split(".", 1)[0]) == compat.SUPPORTED_RELEASES[package][1]


def test_every_entry_of_the_table_names_a_method_the_clients_have():
    """On the newest majors every entry is there; an older release may lack a resource (it has none to intercept)."""
    for name in ("OpenAI", "Anthropic"):
        client = CLIENTS[name]()
        package = _package(client)

        def names(path: tuple[str, ...], methods: Iterable[str], client: Any = client, package: str = package) -> bool:
            """Whether the resource at `path` has each method as a function (where the release has them)."""
            resource = client
            for part in path:
                resource = getattr(resource, part, None)
                if resource is None:
                    return not _newest(package)
            found = [getattr(type(resource), method, None) for method in methods]
            return all(inspect.isfunction(f) or (f is None and not _newest(package)) for f in found)

        for path, specs in surface.INTERCEPTED[package].items():
            assert names(path, [spec.method for spec in specs]), path
        for dotted in surface.REBOUND[package]:
            assert names(dotted[:-1], [dotted[-1]]), dotted
        for path, methods in surface.ON_WRAPPED_CLIENT[package].items():
            assert names(path, methods), path


class _Posted(Exception):
    """Raised by the spy standing in for a client's `post`: the method got as far as its send."""


_MINIMAL = {
    Api.CHAT: {"model": "m", "messages": [{"role": "user", "content": "hi"}]},
    Api.RESPONSES: {"model": "m", "input": "hi"},
    Api.COMPLETIONS: {"model": "m", "prompt": "hi"},
    Api.MESSAGES: {"model": "m", "messages": [{"role": "user", "content": "hi"}]},
}


def _posted_url(package: str, path: tuple[str, ...], spec: surface.Intercept) -> str | None:
    """The URL the bare client's `spec.method` at `path` posts to (None: the client lacks it)."""
    client = CLIENTS["OpenAI" if package == "openai" else "Anthropic"]()
    urls: list[str] = []

    def spy(url: str, **_: Any) -> Any:
        urls.append(url)
        raise _Posted

    client.post = spy  # before any resource exists: each one binds `client.post` when it is made
    resource = client
    for part in path:
        resource = getattr(resource, part, None)
        if resource is None:  # a resource of a newer release
            return None
    kwargs = dict(_MINIMAL[spec.api])
    if spec.kind is Kind.BATCH:
        kwargs = {"requests": [{"custom_id": "a", "params": {**kwargs, "max_tokens": 8}}]}
    elif spec.api is Api.MESSAGES and spec.kind is Kind.CALL:
        kwargs["max_tokens"] = 8
    with pytest.raises(_Posted):
        result = getattr(resource, spec.method)(**kwargs)
        result.__enter__()  # a stream helper's manager sends when entered
    return urls[0]


def test_every_intercepted_method_posts_to_a_path_the_routes_table_sends_the_same_way():
    routed: set[tuple[str, str]] = set()
    for package, resources in surface.INTERCEPTED.items():
        for path, specs in resources.items():
            for spec in specs:
                url = _posted_url(package, path, spec)
                if url is None and not _newest(package):  # an older release has no such resource
                    continue
                assert url is not None, path
                found = surface.route(package, url)
                assert found is not None, f"{'.'.join(path)}.{spec.method} posts to {url}, which ROUTES lacks"
                assert (found[1].api, found[1].kind) == (spec.api, spec.kind), url
                routed.add((package, url.split("?")[0]))
    expected = {(package, url) for package, routes in surface.ROUTES.items() for url in routes}
    assert routed == {(package, url) for package, url in expected if _newest(package) or (package, url) in routed}


@pytest.mark.parametrize("name", sorted(CLIENTS))
def test_the_wrapped_clients_post_and_request_are_kvwises_own(name):
    client = CLIENTS[name]()
    wrapped = sdk.wrap(client)
    for send in sorted(surface.SENDS):
        assert getattr(client, send).__self__ is client
        assert not hasattr(getattr(wrapped, send), "__self__")
        assert inspect.iscoroutinefunction(getattr(wrapped, send)) == inspect.iscoroutinefunction(getattr(client, send))
