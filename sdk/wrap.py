"""`sdk.wrap`: the client proxies (sync and async) and the interception of the four create methods.

The proxy is used exactly like the client it wraps. `chat.completions.create`, `responses.create`,
`messages.create` and `messages.stream` run the request-rewrite chain, then send through the SDK's
retries and telemetry; every other attribute is the wrapped client's own. Sends go through a copy
of the client with `max_retries=0`, so attempts never multiply; a failed call raises the client's
own exception (`errors.client_error`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from sdk.adapters import adapter_for
from sdk.adapters._base import timings_of
from sdk.call import Api, Call, Provider
from sdk.chain import Chain, Middleware
from sdk.errors import client_error
from sdk.fingerprint import PrefixTracker
from sdk.policy import Policy
from sdk.retry import Attempts, acall_with_retries, call_with_retries
from sdk.stream import StreamWatch, guard_async, guard_sync
from sdk.telemetry import CallRecord, Telemetry

_HOSTED = {"api.openai.com": Provider.OPENAI, "api.anthropic.com": Provider.ANTHROPIC}


@dataclass(frozen=True, slots=True)
class _Shared:
    """What every proxy of one `wrap` call shares (the `with_options` copies included)."""

    policy: Policy
    chain: Chain
    telemetry: Telemetry
    is_async: bool
    is_anthropic: bool
    provider: Provider | None
    connection_error: type[Exception]  # the wrapped client's `APIConnectionError`


def wrap(
    client: Any,
    policy: Policy | None = None,
    *,
    tracer_provider: Any = None,
    meter_provider: Any = None,
    middleware: Sequence[Middleware] = (),
    provider: str | None = None,
) -> Any:
    """Wrap an `openai.OpenAI`, `openai.AsyncOpenAI`, `anthropic.Anthropic` or `anthropic.AsyncAnthropic`.

    >>> client = sdk.wrap(openai.OpenAI(), policy=sdk.Policy(max_output_tokens=512))
    >>> client.chat.completions.create(model="gpt-5.6", messages=[...])   # same call, same types

    `provider` ("openai", "anthropic", "openai_compatible") says who serves the calls when the base
    URL does not (a proxy or gateway in front of OpenAI); by default api.openai.com is OpenAI and
    any other OpenAI-API server (vLLM, SGLang, llama.cpp, the local backend) caches prefixes by itself,
    so it gets no cache keys, only the canonical order.
    """
    policy = policy if policy is not None else Policy()
    if not isinstance(policy, Policy):
        raise TypeError(f"policy must be an sdk.Policy, got {type(policy).__name__}")
    kind = _client_kind(client)
    if provider is not None and provider not in tuple(Provider):
        raise ValueError(f"provider must be one of {[p.value for p in Provider]}, got {provider!r}")
    is_anthropic = kind in ("Anthropic", "AsyncAnthropic")
    shared = _Shared(
        policy=policy,
        chain=Chain(policy, PrefixTracker(), middleware),
        telemetry=Telemetry(policy, tracer_provider=tracer_provider, meter_provider=meter_provider),
        is_async=kind in ("AsyncOpenAI", "AsyncAnthropic"),
        is_anthropic=is_anthropic,
        connection_error=__import__("anthropic" if is_anthropic else "openai").APIConnectionError,
        provider=Provider(provider) if provider is not None else None,
    )
    return WrappedClient(client, shared)


def _client_kind(client: Any) -> str:
    for module_name, names in (("openai", ("AsyncOpenAI", "OpenAI")), ("anthropic", ("AsyncAnthropic", "Anthropic"))):
        try:
            module = __import__(module_name)
        except ImportError:
            continue
        for name in names:
            if isinstance(client, getattr(module, name)):
                return name
    raise TypeError(
        "sdk.wrap takes an openai.OpenAI, openai.AsyncOpenAI, anthropic.Anthropic or "
        f"anthropic.AsyncAnthropic client, got {type(client).__name__}"
    )


class _Proxy:
    """Attribute access goes to `target`, except the names in `overrides` (built once, reused)."""

    def __init__(self, target: Any, overrides: dict[str, Any]) -> None:
        self._target = target
        self._overrides = overrides

    def __getattr__(self, name: str) -> Any:
        if name in self._overrides:
            return self._overrides[name]
        return getattr(self._target, name)

    def __repr__(self) -> str:
        return f"<kvwise {self._target!r}>"


class WrappedClient(_Proxy):
    """The wrapped client: the original's attributes, with the create methods intercepted."""

    def __init__(self, client: Any, shared: _Shared) -> None:
        self._client = client
        self._shared = shared
        self._sender = client.with_options(max_retries=0)
        base = urlsplit(str(client.base_url))
        self._server = (base.hostname, base.port or (443 if base.scheme == "https" else 80))
        if shared.provider is not None:
            self._provider = shared.provider
        elif shared.is_anthropic:
            self._provider = Provider.ANTHROPIC
        else:
            self._provider = _HOSTED.get(base.hostname or "", Provider.OPENAI_COMPATIBLE)
        overrides: dict[str, Any] = {"with_options": self._with_options}
        if shared.is_anthropic:
            overrides["messages"] = _Proxy(
                client.messages,
                {
                    "create": self._method(Api.MESSAGES, lambda: self._sender.messages.create),
                    "stream": self._message_stream,
                },
            )
        else:
            create_chat = self._method(Api.CHAT, lambda: self._sender.chat.completions.create)
            overrides["chat"] = _Proxy(client.chat, {"completions": _Proxy(client.chat.completions, {"create": create_chat})})
            overrides["responses"] = _Proxy(
                client.responses, {"create": self._method(Api.RESPONSES, lambda: self._sender.responses.create)}
            )
        super().__init__(client, overrides)

    def __enter__(self) -> WrappedClient:
        self._client.__enter__()
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self._client.__exit__(*exc_info)

    async def __aenter__(self) -> WrappedClient:
        await self._client.__aenter__()
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self._client.__aexit__(*exc_info)

    def _with_options(self, **options: Any) -> WrappedClient:
        return WrappedClient(self._client.with_options(**options), self._shared)

    def _prepare(self, api: Api, kwargs: dict[str, Any]) -> tuple[Call, dict[str, Any]]:
        adapter = adapter_for(api)
        call = adapter.to_call(kwargs, self._provider)
        self._shared.chain.run(call)
        return call, adapter.to_kwargs(call)

    def _method(self, api: Api, native: Callable[[], Callable[..., Any]]) -> Callable[..., Any]:
        if self._shared.is_async:

            async def acreate(**kwargs: Any) -> Any:
                call, native_kwargs = self._prepare(api, kwargs)
                return await self._asend(call, lambda: native()(**native_kwargs))

            return acreate

        def create(**kwargs: Any) -> Any:
            call, native_kwargs = self._prepare(api, kwargs)
            return self._send(call, lambda: native()(**native_kwargs))

        return create

    def _send(self, call: Call, send: Callable[[], Any]) -> Any:
        policy = self._shared.policy
        record = self._shared.telemetry.start(call, self._server)
        attempts = Attempts(policy.retries, record.attempt)
        try:
            with record.activate():
                result = call_with_retries(send, attempts)
        except BaseException as error:
            raise self._failed(record, error)
        if call.stream:
            watch = StreamWatch(adapter_for(call.api), call, policy, record, attempts)
            return guard_sync(result, watch, lambda: call_with_retries(send, attempts))
        return _finish(call, result, record)

    async def _asend(self, call: Call, send: Callable[[], Any]) -> Any:
        policy = self._shared.policy
        record = self._shared.telemetry.start(call, self._server)
        attempts = Attempts(policy.retries, record.attempt)
        try:
            with record.activate():
                result = await acall_with_retries(send, attempts)
        except BaseException as error:
            raise self._failed(record, error)
        if call.stream:
            watch = StreamWatch(adapter_for(call.api), call, policy, record, attempts)
            return guard_async(result, watch, lambda: acall_with_retries(send, attempts))
        return _finish(call, result, record)

    def _failed(self, record: CallRecord, error: BaseException) -> BaseException:
        """End the telemetry of a call whose attempts all failed; return what the caller gets."""
        failure = client_error(error, self._shared.connection_error)
        record.end(error=failure)
        return failure

    def _message_stream(self, **kwargs: Any) -> Any:
        """`messages.stream(...)`: the client's own stream manager around a guarded raw stream."""
        call, native_kwargs = self._prepare(Api.MESSAGES, kwargs)
        call.params["stream"] = True
        stream = self._sender.messages.stream
        request_of = lambda manager: getattr(manager, f"_{type(manager).__name__}__api_request")  # noqa: E731
        if self._shared.is_async:
            from anthropic.lib.streaming import AsyncMessageStreamManager

            async def open_async() -> Any:
                return await self._asend(call, lambda: request_of(stream(**native_kwargs)))

            return AsyncMessageStreamManager(open_async(), output_format=kwargs.get("output_format", _not_given()))
        from anthropic.lib.streaming import MessageStreamManager

        return MessageStreamManager(
            lambda: self._send(call, lambda: request_of(stream(**native_kwargs))()),
            output_format=kwargs.get("output_format", _not_given()),
        )


def _not_given() -> Any:
    from anthropic import NOT_GIVEN

    return NOT_GIVEN


def _finish(call: Call, response: Any, record: CallRecord) -> Any:
    """Finish a non-streamed call: client-side stops, then telemetry."""
    adapter = adapter_for(call.api)
    if call.client_stops:
        adapter.truncate_text(response, call.client_stops)
    record.end(
        usage=adapter.usage(response),
        response_id=getattr(response, "id", None),
        response_model=getattr(response, "model", None),
        finish_reasons=adapter.finish_reasons(response),
        timings=timings_of(response),
        output_text=adapter.output_text(response) if record.captures_content else None,
    )
    return response
