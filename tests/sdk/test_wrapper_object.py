"""The wrapped client is transparent as an object: set, get and delete, `vars()`, a test's patch and
its undoing, signatures, as on the bare client, and nothing of kvwise's ever lands on the live client.

Whether a call went through kvwise is read on the wire: the policy's cap is in the request.
"""

from __future__ import annotations

import copy
import inspect
from typing import Any
from unittest import mock

import anthropic
import openai
import pytest

import sdk
from sdk import surface
from tests.sdk.helpers import resolve

CAP = 55
USER = [{"role": "user", "content": "What is prefill?"}]
PROVIDERS = ("openai", "anthropic")
RESOURCE = {"openai": "chat", "anthropic": "messages"}
TOP_NAMES = {"with_raw_response", "with_streaming_response", "post", "request", "with_options", "copy"}


@pytest.fixture(params=PROVIDERS)
def client(request: pytest.FixtureRequest, simulator: Any, mode: str) -> Any:
    if request.param == "anthropic":
        return (anthropic.Anthropic if mode == "sync" else anthropic.AsyncAnthropic)(
            base_url=simulator.anthropic_base_url, api_key="k"
        )
    return (openai.OpenAI if mode == "sync" else openai.AsyncOpenAI)(base_url=simulator.openai_base_url, api_key="k")


def _package(client: Any) -> str:
    return type(client).__module__.partition(".")[0]


async def _ask(client: Any) -> Any:
    if hasattr(client, "messages"):
        return await resolve(client.messages.create(model="claude-sonnet-4-6", max_tokens=1000, messages=USER))
    return await resolve(client.chat.completions.create(model="gpt-4.1", messages=USER))


def _sent_cap(simulator: Any) -> Any:
    body = simulator.requests[-1].body
    return body.get("max_tokens", body.get("max_completion_tokens"))


def _clean(live: Any, before: dict[str, Any]) -> bool:
    """Whether the live client holds only what it held before, or the client's own bound methods (what
    a patch's undoing leaves on a bare client too)."""
    for name, value in vars(live).items():
        own = getattr(type(live), name, None)
        if value is not before.get(name) and not (inspect.ismethod(value) and value.__func__ is own):
            return False
    return True


def _names(client: Any) -> list[str]:
    """The names on the wrapped client that kvwise gives its own objects for."""
    return sorted(TOP_NAMES | {path[0] for path in surface.INTERCEPTED[_package(client)]})


async def test_a_patch_of_each_name_kvwise_intercepts_is_honoured_then_undone_leaving_the_live_client_as_it_was(
    simulator, client
):
    wrapped = sdk.wrap(client, sdk.Policy(max_output_tokens=CAP))
    await _ask(wrapped)
    for name in _names(client):
        getattr(client, name)  # the client's cached resources made, as a bare client's patch makes them
    before = dict(vars(client))
    for name in _names(client):
        patch = pytest.MonkeyPatch()
        replacement = object()
        patch.setattr(wrapped, name, replacement)
        assert getattr(wrapped, name) is replacement and getattr(client, name) is replacement, name
        patch.undo()
        assert _clean(client, before), name
    await _ask(wrapped)
    assert _sent_cap(simulator) == CAP  # still kvwise's
    await _ask(client)
    assert (
        _sent_cap(simulator) == 1000 if hasattr(client, "messages") else _sent_cap(simulator) is None
    )  # the live client, bare


async def test_mock_patch_of_a_wrapped_method_and_resource_is_honoured_and_undone(simulator, client):
    wrapped = sdk.wrap(client, sdk.Policy(max_output_tokens=CAP))
    name = RESOURCE[_package(client)]
    resource = getattr(getattr(wrapped, name), "completions", getattr(wrapped, name))
    with mock.patch.object(resource, "create", return_value="patched") as create:
        assert await resolve(_ask(wrapped)) == "patched" and create.call_count == 1
    with mock.patch.object(wrapped, name) as patched:
        assert getattr(wrapped, name) is patched and getattr(client, name) is patched
    assert not simulator.requests
    live = getattr(getattr(client, name), "completions", getattr(client, name))
    assert live.create.__func__ is type(live).create  # the live client's own method, untouched
    await _ask(wrapped)
    assert _sent_cap(simulator) == CAP


async def test_an_assigned_resource_is_honoured_and_goes_through_kvwise(simulator, client):
    wrapped = sdk.wrap(client, sdk.Policy(max_output_tokens=CAP))
    name = RESOURCE[_package(client)]
    old = getattr(wrapped, name)
    fresh = type(getattr(client, name))(client)
    setattr(wrapped, name, fresh)
    assert getattr(client, name) is fresh and getattr(wrapped, name) is not old  # as the bare client takes it
    await _ask(wrapped)
    assert _sent_cap(simulator) == CAP
    stand_in = object()
    setattr(wrapped, name, stand_in)  # not a resource of the client's: given back as it is
    assert getattr(wrapped, name) is stand_in


async def test_delete_and_vars_act_on_the_live_client(simulator, client):
    wrapped = sdk.wrap(client, sdk.Policy(max_output_tokens=CAP))
    assert vars(wrapped) is vars(client)
    wrapped.note = "mine"
    assert client.note == "mine"
    del wrapped.note
    assert not hasattr(client, "note") and not hasattr(wrapped, "note")
    with pytest.raises(AttributeError):
        del wrapped.note
    name = RESOURCE[_package(client)]
    getattr(wrapped, name)
    delattr(wrapped, name)  # the client's cached resource: made again on the next read, as bare
    assert name not in vars(client)
    await _ask(wrapped)
    assert _sent_cap(simulator) == CAP


def _methods(client: Any) -> list[tuple[str, Any, Any]]:
    """(where, bare, wrapped) for every intercepted method, plain and in the raw-response forms."""
    wrapped = sdk.wrap(client)
    found = []
    for path, specs in surface.INTERCEPTED[_package(client)].items():
        for form in ((), ("with_raw_response",), ("with_streaming_response",)):
            live, proxy = client, wrapped
            for part in (*path[:-1], *form, path[-1]) if form else path:
                live, proxy = getattr(live, part, None), getattr(proxy, part, None)
            found += [
                (".".join((*path, *form, spec.method)), getattr(live, spec.method), getattr(proxy, spec.method))
                for spec in specs
                if live is not None and hasattr(live, spec.method)
            ]
    found += [
        (name, getattr(client, name), getattr(wrapped, name))
        for name in sorted(TOP_NAMES - {"with_raw_response", "with_streaming_response"})
    ]
    return found


def test_every_wrapped_method_has_the_bare_bound_methods_signature(client):
    methods = _methods(client)
    assert len(methods) >= 10
    for where, bare, ours in methods:
        assert inspect.signature(ours) == inspect.signature(bare), where
        assert ours is not bare, where


async def test_with_options_and_copy_give_wrapped_clients_with_the_options(simulator, client):
    wrapped = sdk.wrap(client, sdk.Policy(max_output_tokens=CAP))
    assert inspect.signature(wrapped.__init__) == inspect.signature(client.__init__)  # what `copy` mirrors
    for name in ("with_options", "copy"):
        copied = getattr(wrapped, name)(timeout=12.5)
        assert isinstance(copied, type(client)) and copied.timeout == 12.5
        await _ask(copied)
        assert _sent_cap(simulator) == CAP


async def test_a_shallow_copy_is_a_wrapped_copy_whose_changes_stay_on_it(simulator, client):
    """What the client's own helpers do (anthropic's `rejecting_non_json`): `copy.copy` the client, then
    change the copy's retries and middleware; the live client keeps its own (here: its retries)."""
    wrapped = sdk.wrap(client, sdk.Policy(max_output_tokens=CAP))
    copied = copy.copy(wrapped)
    copied.max_retries = 7
    assert isinstance(copied, type(client)) and copied.max_retries == 7
    assert client.max_retries == copy.copy(client).max_retries != 7
    await _ask(copied)
    assert _sent_cap(simulator) == CAP


def test_wrapping_leaves_the_live_clients_state_as_it_was(client):
    before = dict(vars(client))
    wrapped = sdk.wrap(client, sdk.Policy(fanout="warm"))
    assert vars(client) == before and all(vars(client)[name] is value for name, value in before.items())
    assert vars(wrapped.copy()).keys() == vars(client.copy()).keys()  # a copy as the bare client's copy
