"""`sdk.wrap`: the client, with every model-calling method of `sdk.surface`'s table going through kvwise.

The wrapped client reads, writes and deletes its attributes on the live client (so `client.api_key =
...` after wrapping is honoured), transparent as an object (`sdk.proxy`), except the resources on the
way to an intercepted one, which it makes from the live client's own (anew when those change). An intercepted
resource is a fresh instance of the client's own resource class on the live client whose
intercepted methods are kvwise's: each runs the call's steps (`sdk.pipeline.Pipeline.prepare`) on its arguments, then
the client's own method on a copy of the resource that sends through `sdk.send.Sender`. So
`parse`, the stream helpers and the `with_raw_response` / `with_streaming_response` forms (the
client's rebindings of those methods, at resource and client level) are the client's own code
around one kvwise send: one span, kvwise's retries, the stream watcher. The client's own `post` and
`request` are kvwise's too: a framework that sends a model call's request through them (LiteLLM
posts `/chat/completions` itself) gets the same steps and send as the table's method posting
to that path (`surface.ROUTES`); any other request goes to the client as it is.
"""

from __future__ import annotations

import copy
import functools
import inspect
import types
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar, cast
from urllib.parse import urlsplit

from sdk import compat, providers, surface
from sdk.adapters import adapter_for
from sdk.adapters._base import is_given
from sdk.cache import diagnostics
from sdk.call import Provider, Server
from sdk.memories import memories_for
from sdk.pipeline import Middleware, Pipeline
from sdk.policy import Policy
from sdk.proxy import Node
from sdk.send.sender import Sender
from sdk.surface import Intercept, Kind, Path
from sdk.telemetry import Telemetry

ClientT = TypeVar("ClientT")

_RAW_FORMS = frozenset({"with_raw_response", "with_streaming_response"})
_COPIES = frozenset({"with_options", "copy"})
_WRAPPER_ASSIGNMENTS = ("__module__", "__name__", "__qualname__", "__doc__")


@dataclass(frozen=True, slots=True)
class _Shared:
    """What every proxy of one `wrap` call shares (the `with_options` copies included)."""

    pipeline: Pipeline
    package: compat.ClientPackage
    provider: Provider | None


def wrap(
    client: ClientT,
    policy: Policy | None = None,
    *,
    tracer_provider: Any = None,
    meter_provider: Any = None,
    middleware: Sequence[Middleware] = (),
    provider: str | None = None,
    state: str | None = None,
) -> ClientT:
    """Wrap an openai 3.x or anthropic 2.x client (sync or async; Azure, Bedrock, Vertex, Foundry too).

    >>> client = sdk.wrap(openai.OpenAI(), policy=sdk.Policy(max_output_tokens=512))
    >>> client.chat.completions.create(model="gpt-5.6", messages=[...])   # same call, same types

    Type checkers see the client's own type. `provider` ("openai", "anthropic",
    "openai_compatible") says who serves the calls when the base URL does not (a gateway in front
    of OpenAI); by default api.openai.com is OpenAI and any other OpenAI-API server (vLLM, SGLang,
    llama.cpp, the local backend) caches prefixes by itself, so it gets no cache keys, only the
    canonical order. `state` (else $KVWISE_STATE_URL) says where what the client learns is kept: by
    default a SQLite file under the user's cache directory, shared by this machine's processes
    (`sdk.memory.sqlite_store`); "memory" keeps it in this process, "sqlite:///path" names another
    file, "redis://host:6379/0" puts it in Redis or Valkey for a fleet (`sdk.memory.place`).
    """
    policy = policy if policy is not None else Policy()
    if not isinstance(policy, Policy):
        raise TypeError(f"policy must be an sdk.Policy, got {type(policy).__name__}")
    package = compat.client_package(client)
    known = [facts.provider for facts in providers.PROVIDERS]
    if provider is not None and provider not in known:
        raise ValueError(f"provider must be one of {[str(name) for name in known]}, got {provider!r}")
    memories = memories_for(client, policy, state)
    pipeline = Pipeline(
        policy,
        memories,
        middleware,
        diagnostics=diagnostics.eligible(client, provider),
        telemetry=Telemetry(policy, tracer_provider=tracer_provider, meter_provider=meter_provider),
        connection_error=package.connection_error,
    )
    shared = _Shared(pipeline, package, Provider(provider) if provider is not None else None)
    return cast(ClientT, WrappedClient.wrapping(client, shared))


class WrappedClient(Node):
    """The wrapped client: the live client's attributes, with the table's methods intercepted."""

    __slots__ = ("_shared", "_views", "_where", "_own_methods")

    @classmethod
    def wrapping(cls, client: Any, shared: _Shared) -> WrappedClient:
        """The wrapped `client`, under `shared`'s policy and telemetry."""
        wrapped = cls.of(client, ())
        object.__setattr__(wrapped, "_shared", shared)
        object.__setattr__(wrapped, "_views", {})
        object.__setattr__(wrapped, "_where", (None, Provider.OPENAI, (None, None)))
        object.__setattr__(wrapped, "_own_methods", surface.SENDS | _COPIES)
        return wrapped

    @property  # type: ignore[misc]
    def __class__(self) -> type:  # isinstance(wrapped, openai.OpenAI) holds, as for the bare client
        return type(self._target)

    def __enter__(self) -> WrappedClient:
        self._target.__enter__()
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self._target.__exit__(*exc_info)

    async def __aenter__(self) -> WrappedClient:
        await self._target.__aenter__()
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self._target.__aexit__(*exc_info)

    def __copy__(self) -> WrappedClient:
        """`copy.copy(wrapped)`: a wrapped shallow copy of the live client, as `copy()` gives (the
        client's own helpers copy a client so, to change its retries or middleware on the copy alone)."""
        return WrappedClient.wrapping(copy.copy(self._target), self._shared)

    def _made(self, node: Node, name: str, current: Any) -> Any:
        """kvwise's objects: the raw-response forms rebinding kvwise's methods, the intercepted
        resources (`_view`), the resources on the way to them, the client's own sends and copies;
        only of the client's own objects (a test's mock or a user's object is given back as it is)."""
        package = self._shared.package.name
        if name in _RAW_FORMS:
            if not compat.is_clients_own(current, package):
                return current
            return type(current)(node)  # the client's own wrapper, rebinding our methods
        if not node._path and name in self._own_methods:
            return self._own_method(name, current)
        path = (*node._path, name)
        if not surface.leads_to_intercepted(package, path) or not compat.is_resource(current, package):
            return current
        return self._view(path, current) if surface.intercepted(package, path) else Node.of(current, path, self)

    def _own_method(self, name: str, current: Any) -> Any:
        """kvwise's `post`/`request` (`_send_method`) or `with_options`/`copy` (a wrapped copy under
        the same policy and telemetry), with the client's signature; a replacement that is not the
        client's own method (a test's patch) is given back as it is."""
        if not inspect.ismethod(current) or current.__self__ is not self._target:
            return current
        if name in _COPIES:

            def copied(*args: Any, **options: Any) -> Any:
                return WrappedClient.wrapping(current(*args, **options), self._shared)

            return functools.update_wrapper(copied, current, assigned=_WRAPPER_ASSIGNMENTS, updated=())
        return self._send_method(current)

    def _view(self, path: Path, resource: Any) -> Any:
        """The intercepted resource at `path`: the client's own class, kvwise's methods (made once per
        resource of the client's)."""
        views: dict[Path, tuple[Any, Any]] = self._views
        made = views.get(path)
        if made is not None and made[1] is resource:
            return made[0]
        view = compat.new_resource(resource)
        for spec in surface.intercepted(self._shared.package.name, path):
            if hasattr(type(view), spec.method):  # Bedrock's beta messages have no count_tokens
                setattr(view, spec.method, self._method(view, spec))
        for name in surface.on_wrapped_client(self._shared.package.name, path):
            if hasattr(type(view), name):
                setattr(view, name, self._on_wrapped_client(view, name))
        for child in surface.INTERCEPTED[self._shared.package.name]:
            if child[:-1] == path and (sub := getattr(resource, child[-1], None)) is not None:
                setattr(view, child[-1], self._view(child, sub))
        views[path] = (view, resource)
        return view

    def _method(self, view: Any, spec: Intercept) -> Callable[..., Any]:
        """kvwise's `spec.method` of `view`: the call's steps, then the client's own method sending
        through kvwise; bound to `view`, so its signature is the client's bound method's."""
        original = getattr(type(view), spec.method)
        accepted = _parameters(original)
        if inspect.iscoroutinefunction(original):

            async def amethod(resource: Any, *args: Any, **kwargs: Any) -> Any:
                sender, native = self._prepare(spec, kwargs, compat.resource_client(resource), accepted)
                return await original(self._sending(resource, sender), *args, **native)

            method: Callable[..., Any] = amethod
        else:

            def method(resource: Any, *args: Any, **kwargs: Any) -> Any:
                sender, native = self._prepare(spec, kwargs, compat.resource_client(resource), accepted)
                return original(self._sending(resource, sender), *args, **native)

        functools.update_wrapper(method, original, assigned=_WRAPPER_ASSIGNMENTS, updated=())
        return types.MethodType(method, view)

    def _on_wrapped_client(self, view: Any, name: str) -> Callable[..., Any]:
        """The client's own `name` of `view`, run on a copy of it whose client is this wrapped client
        (`surface.ON_WRAPPED_CLIENT`), bound to `view`."""
        original = getattr(type(view), name)

        def method(resource: Any, *args: Any, **kwargs: Any) -> Any:
            return original(compat.with_client(resource, self), *args, **kwargs)

        functools.update_wrapper(method, original, assigned=_WRAPPER_ASSIGNMENTS, updated=())
        return types.MethodType(method, view)

    def _sending(self, view: Any, sender: Sender) -> Any:
        """A copy of `view` sending through `sender` (the async clients' methods, coroutine functions
        or not, await their `_post`)."""
        return compat.with_send(view, sender.apost if self._shared.package.is_async else sender.post)

    def _send_method(self, original: Any) -> Callable[..., Any]:
        """kvwise's `post` or `request` (`original`, the live client's): a model call's request
        (`surface.route`) through kvwise's steps and send; any other request as the client sends it."""
        name = original.__name__
        as_post = compat.post_arguments if name == "post" else compat.request_as_post
        if self._shared.package.is_async:

            async def asend(*args: Any, **kwargs: Any) -> Any:
                routed = self._routed(as_post(args, kwargs))
                if routed is None:
                    return await original(*args, **kwargs)
                sender, request = routed
                return await sender.asend(request)

            method: Callable[..., Any] = asend
        else:

            def method(*args: Any, **kwargs: Any) -> Any:
                routed = self._routed(as_post(args, kwargs))
                if routed is None:
                    return original(*args, **kwargs)
                sender, request = routed
                return sender.send(request)

        return functools.update_wrapper(method, original, assigned=_WRAPPER_ASSIGNMENTS, updated=())

    def _routed(self, request: compat.Request | None) -> tuple[Sender, compat.Request] | None:
        """A lower-level send's request rewritten as the table's method would send it, with its sender;
        None for a request that is no model call kvwise reads (passed through as it is)."""
        if request is None:
            return None
        found = surface.route(self._shared.package.name, _relative(request.path, compat.base_url(self._target)))
        if found is None or not isinstance(request.body, Mapping) or not compat.answers_in_models(request.cast_to):
            return None
        path, spec = found
        resource = self._target
        for name in path:
            resource = getattr(resource, name)
        method = getattr(type(resource), spec.method, None)
        if method is None:  # a platform without this method (Bedrock counts no tokens): the client's own answer
            return None
        accepted = _parameters(method)
        kwargs = request.keywords()
        sender, native = self._prepare(spec, kwargs, self._target, None if accepted is None else accepted | set(kwargs))
        return sender, request.with_keywords(native)

    def _prepare(
        self, spec: Intercept, kwargs: dict[str, Any], client: Any, accepted: frozenset[str] | None
    ) -> tuple[Sender, dict[str, Any]]:
        """The arguments of one call as kvwise sends them through the live `client` (`Pipeline.prepare`
        for the steps), with the call's sender (a token count's only with the parameters in
        `accepted`, None: any)."""
        provider, server = self._provider_and_server()
        adapter = adapter_for(spec.api)
        if spec.kind is Kind.BATCH:
            return self._prepare_batch(spec, kwargs, client, provider, server)
        call = adapter.to_call(kwargs, provider)
        call.endpoint = (
            str(compat.base_url(client)),
            hash((getattr(client, "api_key", None), getattr(client, "auth_token", None))),
        )
        call.takes = accepted if spec.kind is Kind.CALL else None  # a count keeps what its method takes (below)
        sender = self._shared.pipeline.prepare(call, spec.kind, client, server)
        native = adapter.to_kwargs(call)
        if spec.kind is Kind.COUNT and accepted is not None:  # not the output parameters the decode limits add
            native = {key: value for key, value in native.items() if key in accepted}
        return sender, native

    def _prepare_batch(
        self, spec: Intercept, kwargs: dict[str, Any], client: Any, provider: Provider, server: Server
    ) -> tuple[Sender, dict[str, Any]]:
        """Every request of a batch through the steps; the batch's span describes its first request."""
        adapter = adapter_for(spec.api)
        pipeline = self._shared.pipeline
        given: Iterable[Any] | None = kwargs.get("requests")
        as_written = given is None or not is_given(given)  # the caller's None (or nothing) goes as they wrote it
        requests, senders = [], []
        for request in given if given is not None and not as_written else ():
            call = adapter.to_call(dict(request["params"]), provider)
            senders.append(pipeline.prepare(call, spec.kind, client, server))
            requests.append({**request, "params": adapter.to_kwargs(call)})
        if not senders:  # an empty batch, or none (the server refuses it): a placeholder request for its span
            placeholder = adapter.to_call({"model": "", "messages": []}, provider)
            senders.append(pipeline.prepare(placeholder, spec.kind, client, server))
        return senders[0], kwargs if as_written else {**kwargs, "requests": requests}

    def _provider_and_server(self) -> tuple[Provider, Server]:
        """Who serves the live client's base URL (read at each call: it may have been changed)."""
        base_url = compat.base_url(self._target)  # the same object until someone sets it
        key, provider, server = self._where
        if key is not base_url:
            base = urlsplit(str(base_url))
            server = (base.hostname, base.port or (443 if base.scheme == "https" else 80))
            provider = self._shared.provider or providers.provider_for(base.hostname, self._shared.package.name)
            object.__setattr__(self, "_where", (base_url, provider, server))
        return provider, server


@functools.cache
def _parameters(function: Callable[..., Any]) -> frozenset[str] | None:
    """The keyword parameters `function` takes (None: it takes any)."""
    parameters = inspect.signature(function).parameters.values()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return None
    return frozenset(p.name for p in parameters)


def _relative(url: str, base_url: Any) -> str:
    """`url` relative to the client's base URL (the clients' sends take both forms)."""
    base = str(base_url).rstrip("/")
    return url[len(base) :] if base and url.startswith(base) else url
