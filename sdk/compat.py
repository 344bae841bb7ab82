"""Every contact kvwise has with the clients' private parts, checked against the installed release.

kvwise wraps openai from 1.40 and anthropic from 0.40, up to the newest majors it knows (openai 3.x,
anthropic 2.x). Every release in that range is generated from one template (Stainless), and kvwise
relies on these parts of it, nowhere else:

- a resource's `_post` (the bound send all its methods call): `with_send` copies a resource and
  swaps `_post` for kvwise's send, so the client's own `create`, `parse` and stream helpers run
  unchanged around it; and its `_client`, which `with_client` swaps for the wrapped client where a
  method sends later through the client (anthropic's message threads and tool runner);
- the request options `max_retries`, `headers` and anthropic's `span_name` (its own call span is
  started only for a request naming one: none where its tracer records nothing), and the header
  name `X-Stainless-Raw-Response` (marks the `with_raw_response` / `with_streaming_response` forms);
- what the client's own retry loop leaves behind (`retries_taken`): a raw response's
  `retries_taken`, and the `x-stainless-retry-count` of the request behind a stream's or an error's
  HTTP response (`retries_taken`); and its response wrappers (`_response.APIResponse` /
  `AsyncAPIResponse`), which `post` returns for a `cast_to` of theirs, so a parsed answer's
  `retries_taken` is read too (`counting_cast_to`);
- a raw response's parse cache (`_parsed_by_type`), so `.parse()` of a streamed raw response gives
  the watched stream;
- the client package's base classes (`_base_client.SyncAPIClient` / `AsyncAPIClient`,
  `_resource.SyncAPIResource` / `AsyncAPIResource`: only the client's own resources are
  intercepted) and the client's `_base_url` (read at each call, so a changed base URL is honoured);
- a stream's `_iterator` (what its `__iter__`/`__next__` read), set on a copy of the client's stream
  object for a client whose stream class takes no proxy (`stream_takes_proxy`: anthropic 0.x's
  `isinstance` answers False for any object whose type is not exactly its own);
- the client's own `post(path, *, cast_to, body, options, stream, stream_cls)` and
  `request(cast_to, options, *, stream, stream_cls)`, whose `FinalRequestOptions` (`method`, `url`,
  `json_data`, and the fields set on it) `request_as_post` turns back into `post`'s arguments;
  the request option `extra_json`, where the methods' `extra_body` travels to be merged over the
  body, and the methods' transport keywords (`extra_headers`, `extra_query`, `extra_body`,
  `timeout`). A send's `post` arguments are read once into kvwise's own `Request` (the body, the
  caller's extra body, the options) and written back from it for each send: no other module names
  these parts (`tests/sdk/test_private_request_names.py`).

`client_package` runs at `wrap()` time and raises `UnsupportedClient`, naming the supported
releases, when the installed client is outside the range or lacks one of these parts. What differs
within the range (a `create()` parameter, a field, how a cut stream is raised) is told by probing the
installed client itself, where it is used, never by its version number.
"""

from __future__ import annotations

import abc
import functools
import importlib
import inspect
import re
import sys
import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import pydantic

from sdk.errors import UnsupportedClient

SUPPORTED_RELEASES = {"openai": ((1, 40), 3), "anthropic": ((0, 40), 2)}
"""The releases kvwise wraps: from the oldest (major, minor) through the newest major it knows."""
SUPPORTED = (
    "openai 1.40 to 3.x (OpenAI, AzureOpenAI and their async twins) or anthropic 0.40 to 2.x "
    "(Anthropic, AnthropicBedrock, AnthropicVertex, AnthropicFoundry and their async twins)"
)

RETRY_COUNT_HEADER = "x-stainless-retry-count"
"""The header in which the client's own retry loop sends each attempt's number (0 for the first)."""
RAW_RESPONSE_HEADER = "X-Stainless-Raw-Response"
EXTRA_BODY = "extra_body"
"""The methods' keyword whose mapping the client merges over the request body."""
_EXTRA_BODY_OPTION = "extra_json"
"""The request option that carries a call's `extra_body` (merged over the body when the request is built)."""
TRANSPORT_KEYWORDS = frozenset({"extra_headers", "extra_query", EXTRA_BODY, "timeout"})
"""The methods' keywords that are the client's transport options, never sent as body parameters."""
SPAN_NAME_OPTION = "span_name"


@dataclass(frozen=True, slots=True)
class ClientPackage:
    """What kvwise needs to know about a wrapped client's package."""

    name: str  # "openai" or "anthropic"
    is_async: bool
    connection_error: type[Exception]  # what a stream of the client raises when its connection breaks (`_breaks`)


def client_package(client: object) -> ClientPackage:
    """The package (and sync/async kind) of a supported client; `UnsupportedClient` for anything else."""
    for name in SUPPORTED_RELEASES:
        # A client of a package is an instance of its classes only once the package is imported: the
        # other package is never imported for the check (importing openai is slow for an Anthropic app:
        # docs/benchmarks.md, `by_hand`).
        base = sys.modules.get(f"{name}._base_client")
        if base is not None and isinstance(client, (base.SyncAPIClient, base.AsyncAPIClient)):
            _check_release(name)
            return ClientPackage(name, isinstance(client, base.AsyncAPIClient), _breaks(name))
    raise UnsupportedClient(
        f"sdk.wrap takes a client of {SUPPORTED}, got {type(client).__module__}.{type(client).__name__}"
    )


@functools.cache
def _breaks(name: str) -> type[Exception]:
    """What a stream of the `name` client raises when its connection drops or times out mid-body: its
    `APIConnectionError` (which 2.x and 3.x raise, chained to the transport error), or its HTTP
    library's `TransportError` (`RemoteProtocolError`, `ReadError`, `ReadTimeout`), which older
    releases let escape. One class that both are instances of (an ABC they are registered with); a
    library whose transport errors never escape loses nothing by being registered."""
    module = importlib.import_module(name)
    base = importlib.import_module(f"{name}._base_client")

    class StreamBreak(Exception, metaclass=abc.ABCMeta):
        """A stream's broken connection, as the wrapped client raises it (`compat._breaks`)."""

    StreamBreak.register(module.APIConnectionError)
    for library in _HTTP_LIBRARIES:  # the one the client sends with: httpx, or httpx2 from openai 3.x
        http = getattr(base, library, None)
        if isinstance(http, types.ModuleType):
            StreamBreak.register(http.TransportError)
    return StreamBreak


_HTTP_LIBRARIES = ("httpx", "httpx2")


@functools.cache
def _check_release(name: str) -> None:
    """Raise `UnsupportedClient` unless the installed `name` is a supported release with the parts above."""
    module = importlib.import_module(name)
    version = str(getattr(module, "__version__", "0"))
    (oldest, newest_major) = SUPPORTED_RELEASES[name]
    release = tuple(int(part) for part in re.findall(r"\d+", version)[:2])
    if not oldest <= release < (newest_major + 1,):
        raise UnsupportedClient(
            f"sdk.wrap supports {SUPPORTED}; the installed {name} is {version}: "
            f"install {name}>={'.'.join(map(str, oldest))},<{newest_major + 1}"
        )
    types = importlib.import_module(f"{name}._types")
    resource = importlib.import_module(f"{name}._resource")
    response = importlib.import_module(f"{name}._response")
    base = importlib.import_module(f"{name}._base_client")
    models = importlib.import_module(f"{name}._models")
    missing = [
        what
        for what, present in (
            ("RequestOptions.max_retries", "max_retries" in types.RequestOptions.__annotations__),
            ("RequestOptions.headers", "headers" in types.RequestOptions.__annotations__),
            ("SyncAPIResource._post", "self._post = client.post" in _source(resource.SyncAPIResource.__init__)),
            ("APIResponse._parsed_by_type", "_parsed_by_type" in response.BaseAPIResponse.__annotations__),
            (
                "SyncAPIClient.post(body=, options=, stream_cls=)",
                _POST_PARAMETERS <= set(inspect.signature(base.SyncAPIClient.post).parameters),
            ),
            *(
                (f"FinalRequestOptions.{field}", field in models.FinalRequestOptions.model_fields)
                for field in _NEEDED_REQUEST_FIELDS
            ),
        )
        if not present
    ]
    if missing:
        raise UnsupportedClient(
            f"sdk.wrap supports {SUPPORTED}; the installed {name} {version} lacks {', '.join(missing)}, "
            "which kvwise relies on"
        )


_POST_PARAMETERS = frozenset({"path", "cast_to", "body", "options", "stream", "stream_cls"})
_REQUEST_FIELDS = frozenset({"method", "url", "json_data", "files", "content"})
"""The `FinalRequestOptions` fields that are `post`'s own arguments, not its `options` (`content`, a raw
body, came with openai 2.16 and anthropic 0.x: absent, no request carries one)."""
_NEEDED_REQUEST_FIELDS = ("method", "url", "json_data", "files")


def _source(function: Callable[..., Any]) -> str:
    """`function`'s source; where none is installed (bytecode only) the check is skipped."""
    try:
        return inspect.getsource(function)
    except (OSError, TypeError):
        return "self._post = client.post"


_BASE_URL_FIELDS = ("_configured_base_url", "_base_url")
"""Where the installed clients keep the base URL: openai's (since its `lib._client_auth`) and anthropic's."""


def base_url(client: Any) -> Any:
    """The client's base URL object, read without the `base_url` property's cost (openai's imports
    a module on every read); the property where neither field is there."""
    fields = getattr(client, "__dict__", {})
    for name in _BASE_URL_FIELDS:
        url = fields.get(name)
        if url is not None:
            return url
    return client.base_url


def resource_client(resource: Any) -> Any:
    """The client a resource sends through."""
    return resource._client


def new_resource(resource: Any) -> Any:
    """A fresh resource of the same class on the same client: none of `resource`'s cached sub-resources."""
    return type(resource)(resource._client)


def is_resource(value: Any, package: str) -> bool:
    """Whether `value` is one of the client package's own resources (`_resource.SyncAPIResource` /
    `AsyncAPIResource`), which kvwise may intercept, rather than a test's mock or a user's object."""
    module = sys.modules.get(f"{package}._resource")
    return module is not None and isinstance(value, (module.SyncAPIResource, module.AsyncAPIResource))


def is_clients_own(value: Any, package: str) -> bool:
    """Whether `value` is an object of the client package's own classes (its raw-response forms)."""
    return type(value).__module__.partition(".")[0] == package


def with_client(resource: Any, client: Any) -> Any:
    """A copy of `resource` whose `_client` (what its methods that send later read) is `client`."""
    return _copy(resource, _client=client)


def with_send(resource: Any, post: Callable[..., Any]) -> Any:
    """A copy of `resource` whose methods send through `post` (same signature as the client's `post`)."""
    return _copy(resource, _post=post)


def _copy(resource: Any, **fields: Any) -> Any:
    """A shallow copy of `resource` with `fields` set on it (no `__init__` run)."""
    copied = object.__new__(type(resource))
    copied.__dict__.update(resource.__dict__, **fields)
    return copied


@dataclass(slots=True)
class Request:
    """One send's request, kvwise's own value: the client's `post(path, **arguments)` read once, the
    caller's extra body (the methods' `extra_body`) apart from the other request options, and written
    back as `post`'s arguments for each send (`send_kwargs`). A take-back rewrites `body` and `extra`
    here, never the client's own objects. What a send asks of it more than once is read here once
    (`stream`, `cast_to`, `raw_mode`): a call reads each twice or more."""

    path: str
    body: Any  # the JSON body the client's method built, before `extra` is merged over it (None: none)
    extra: Mapping[str, Any] | None  # the caller's extra body (None: none)
    options: Mapping[str, Any] | None  # the request options but the extra body (None: none given)
    arguments: dict[str, Any]  # `post`'s other keyword arguments (`cast_to`, `stream`, `stream_cls`)
    stream: bool  # whether the client's method asked `post` for a stream (a stream helper says so only there)
    cast_to: Any  # what the client's method asked `post` to parse the answer into
    raw_mode: str | None  # which raw-response form it is ("raw", "true", "stream"); None: a plain call

    @classmethod
    def of_post(cls, path: str, arguments: Mapping[str, Any]) -> Request:
        """The request of the client's `post(path, **arguments)`."""
        rest = dict(arguments)
        body, options = rest.pop("body", None), rest.pop("options", None)
        extra = options.get(_EXTRA_BODY_OPTION) if options else None
        if extra is not None:
            options = {name: value for name, value in options.items() if name != _EXTRA_BODY_OPTION}
        raw_mode = _headers(options).get(RAW_RESPONSE_HEADER)
        return cls(
            path,
            body,
            extra,
            options,
            rest,
            bool(rest.get("stream")),
            rest.get("cast_to"),
            raw_mode if isinstance(raw_mode, str) else None,
        )

    def keywords(self) -> dict[str, Any]:
        """The body as a method's keyword arguments: its parameters, and a copy of the caller's extra
        body as `extra_body`."""
        kwargs = dict(self.body)
        if self.extra is not None:
            kwargs[EXTRA_BODY] = dict(self.extra)
        return kwargs

    def with_keywords(self, kwargs: Mapping[str, Any]) -> Request:
        """This request sending the body and extra body of a method's keyword arguments (`keywords`)."""
        body = dict(kwargs)
        extra = body.pop(EXTRA_BODY, None)
        return Request(self.path, body, extra, self.options, self.arguments, self.stream, self.cast_to, self.raw_mode)

    def send_kwargs(
        self, trace_headers: Mapping[str, str] | None = None, max_retries: int | None = None, cast_to: Any = None
    ) -> dict[str, Any]:
        """`post`'s keyword arguments for one send: the body, and the caller's options as written with
        their extra body (the client's own retry loop runs as it does bare), with `max_retries` where
        `Policy.retries` gives one (`sdk.send.retry`), and with `trace_headers`
        (`sdk.telemetry.client_tracing`, where the client's tracer records nothing) no call span of the
        client's (anthropic starts one only for a request option `span_name`) and those headers in place
        of the context it would write; `cast_to` in place of the method's where given."""
        kwargs = dict(self.arguments)
        if self.body is not None:
            kwargs["body"] = self.body
        options = self.options if self.extra is None else {**(self.options or {}), _EXTRA_BODY_OPTION: self.extra}
        if trace_headers is not None or max_retries is not None:
            options = dict(options or {})
            if max_retries is not None:
                options["max_retries"] = max_retries
            if trace_headers is not None:
                options.pop(SPAN_NAME_OPTION, None)
                options["headers"] = {**(options.get("headers") or {}), **trace_headers}
        if options is not None:
            kwargs["options"] = options
        if cast_to is not None:
            kwargs["cast_to"] = cast_to
        return kwargs


def _headers(options: Mapping[str, Any] | None) -> Mapping[str, Any]:
    """The headers request `options` set ({}: none)."""
    return (options or {}).get("headers") or {}


def extra_body_of(params: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The caller's `extra_body` among a method's keyword arguments; None where there is none (or it
    is not a mapping, which only the client can judge)."""
    extra = params.get(EXTRA_BODY)
    return extra if extra is not None and isinstance(extra, Mapping) else None  # None first: the ABC check costs


def own_extra_body(params: dict[str, Any]) -> dict[str, Any]:
    """The caller's `extra_body` in `params` replaced by a dict of kvwise's own, which a step may
    rewrite without touching theirs; {} where there is none (then `params` is left as it is)."""
    extra = extra_body_of(params)
    if extra is None:
        return {}
    owned = params[EXTRA_BODY] = dict(extra)
    return owned


def add_to_extra_body(params: dict[str, Any], name: str, value: Any) -> bool:
    """Send `value` as the body's `name` through the `extra_body` in `params`, unless the caller's sets
    it (or is not a dict); whether it was added."""
    extra = params.get(EXTRA_BODY)
    if extra is not None and not (isinstance(extra, dict) and name not in extra):
        return False
    params[EXTRA_BODY] = {**(extra or {}), name: value}
    return True


def as_body(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """A method's keyword arguments as the request body carries them: `extra_body` merged over the
    parameters, the transport keywords out."""
    body = {key: value for key, value in kwargs.items() if key not in TRANSPORT_KEYWORDS}
    extra = kwargs.get(EXTRA_BODY)
    if isinstance(extra, Mapping):
        body.update(extra)
    return body


def retries_taken(outcome: object, request: Request) -> int:
    """How many retries the client's own loop took before `outcome` (what its `post` returned or
    raised), where the outcome says: a raw response's `retries_taken`; else the
    `x-stainless-retry-count` the client sent on the request behind a stream's or an error's HTTP
    response, unless the caller set that header (`request`'s options). 0 where nothing says (a parsed
    answer keeps no trace of its retries)."""
    taken = getattr(outcome, "retries_taken", None)
    if isinstance(taken, int) and not isinstance(taken, bool):
        return taken
    if any(isinstance(name, str) and name.lower() == RETRY_COUNT_HEADER for name in _headers(request.options)):
        return 0
    response = getattr(outcome, "response", None)
    try:  # an HTTP response a middleware built itself has no request (httpx raises RuntimeError)
        sent = getattr(response, "request", None) if response is not None else getattr(outcome, "request", None)
        return int(sent.headers.get(RETRY_COUNT_HEADER, 0)) if sent is not None else 0
    except (AttributeError, RuntimeError, TypeError, ValueError):  # no request, or not the client's header
        return 0


def counting_cast_to(client: Any, cast_to: Any, is_async: bool, own_span: bool) -> Any:
    """`cast_to` wrapped in the client's own response class (`APIResponse[cast_to]`, its async twin for
    an async client), for a send whose answer is parsed into a model: the client's `post` then returns
    the wrapper its `_process_response` builds, with the `retries_taken` of its own retry loop, and its
    `.parse()` gives what `post` would have returned (`_process_response` calls that very `parse`).
    None where the wrapper would show: anthropic's middleware sees `cast_to`, and its own call span
    (`own_span`) records the answer."""
    if not answers_in_models(cast_to) or own_span or getattr(client, "_middleware", None):
        return None
    response = sys.modules.get(f"{type(client).__module__.split('.', 1)[0]}._response")
    wrapper = getattr(response, "AsyncAPIResponse" if is_async else "APIResponse", None)
    return wrapper[cast_to] if wrapper is not None else None


def cache_parsed(raw: Any, value: Any) -> None:
    """Make `raw.parse()` return `value` (the watched stream) from now on."""
    raw._parsed_by_type[raw._cast_to] = value


def post_arguments(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Request | None:
    """The request of a `post` call; None for a call the client itself would refuse (more than the one
    positional argument)."""
    if len(args) > 1 or (not args and "path" not in kwargs):
        return None
    rest = dict(kwargs)
    path = args[0] if args else rest.pop("path")
    return Request.of_post(path, rest) if isinstance(path, str) else None


def request_as_post(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Request | None:
    """The request of a `request(cast_to, options, *, stream, stream_cls)` call that POSTs a JSON body,
    as `post` would build it (`post` makes `FinalRequestOptions.construct(method="post", url=path,
    json_data=body, **options)`); None for any other request."""
    given = dict(zip(("cast_to", "options"), args)) | dict(kwargs)
    final = given.pop("options", None)
    if len(args) > 2 or "cast_to" not in given or str(getattr(final, "method", "")).lower() != "post":
        return None
    if getattr(final, "files", None) is not None or getattr(final, "content", None) is not None:
        return None
    options = {name: getattr(final, name) for name in final.model_fields_set - _REQUEST_FIELDS}
    return Request.of_post(final.url, {**given, "body": final.json_data, "options": options})


def answers_in_models(cast_to: Any) -> bool:
    """Whether a send's answer is parsed into the client's own types (a pydantic model class, as the
    resources' methods ask for) rather than left as bytes, a dict or the HTTP response."""
    return isinstance(cast_to, type) and issubclass(cast_to, pydantic.BaseModel)


def stream_takes_proxy(stream: Any) -> bool:
    """Whether `isinstance(proxy, type(stream))` holds for a proxy of `stream`, as Python's own check
    gives it (the proxy's `__class__`); anthropic 0.x's stream classes answer False for anything whose
    type is not exactly theirs. Probed once per stream class."""
    stream_class = type(stream)
    takes = _TAKES_PROXY.get(stream_class)
    if takes is None:
        import wrapt  # with the stream watcher, on the first stream (tests/sdk/test_first_call.py)

        proxy: Any = wrapt.ObjectProxy(object.__new__(stream_class))
        takes = _TAKES_PROXY[stream_class] = isinstance(proxy, stream_class)
    return takes


_TAKES_PROXY: dict[type, bool] = {}


def stream_reading(stream: Any, events: Any) -> Any:
    """A copy of the client's `stream` object (its own class, no `__init__` run) that hands on `events`
    instead of its own iterator."""
    return _copy(stream, _iterator=events)
