"""`ProviderSimulator`: a fake OpenAI + Anthropic server on loopback for tests with the real clients.

```python
with ProviderSimulator() as sim:
    client = openai.OpenAI(base_url=sim.openai_base_url, api_key="test")
    sim.reply = "Some answer text."          # streamed token by token (see `tokens`)
    sim.first_token_delay = 0.3              # before the first event / the JSON body
    sim.loop("I keep saying this. ")         # replies repeat this until the cap or a hang-up
    sim.fail(429, times=2, headers={"retry-after": "0"})
    sim.cut_stream_after(5)                  # next stream ends after 5 tokens, no final event
    sim.stall(2.0)                           # next answer waits 2 s more before its first event
    sim.inject_event("bad_json", at_token=3) # next stream carries a malformed event before token 3
    client.chat.completions.create(...)
    sim.requests[-1].body, sim.streams[-1].tokens_sent
```

Serves `POST /v1/chat/completions`, `/v1/completions`, `/v1/responses`, `/v1/messages` (JSON, or
SSE with `"stream": true`; also at the Bedrock, Vertex and Azure paths, see `platforms`),
`/v1/messages/count_tokens`, `/v1/messages/batches` and `/v1/responses/input_tokens` (see `instant`),
and `GET /v1/models` (OpenAI's list shape, Anthropic's when the request carries
`anthropic-version`). Cache accounting: `cache.PrefixCache` for OpenAI, `cache.BreakpointCache` for
Anthropic; every served prompt is remembered once its answer ends (even if the client hung up).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import replace
from types import TracebackType
from typing import Any, Literal

from . import instant, platforms
from .anthropic_messages import MessagesApi, MessagesEncoder
from .cache import BreakpointCache, CacheUse, PrefixCache
from .constants import (
    ANTHROPIC_MIN_CACHE_TOKENS,
    DEFAULT_MAX_OUTPUT_TOKENS,
    DEFAULT_MODELS,
    DEFAULT_REPLY,
    HOLD_TIMEOUT_SECONDS,
    HOST,
    IDLE_WAIT_SECONDS,
)
from .decode import decode
from .errors import Flavour, SimulatedError, request_id_header
from .faults import (
    CutFault,
    CutMode,
    ErrorFault,
    EventFault,
    EventKind,
    Fault,
    FaultQueue,
    HoldFault,
    HtmlFault,
    ResetFault,
    StallFault,
)
from .openai_chat import ChatCompletionsApi
from .openai_completions import CompletionsApi
from .openai_responses import ResponsesApi
from .records import RecordedRequest, StreamRecord
from .respond import Timing, injection, send_stream, send_whole
from .server import Exchange, LoopbackServer
from .shapes import shaped_encoder, stream_tokens
from .wire import GenerationEndpoint, Job, ServedJob, now

MODELS_PATH = "/v1/models"
HTML_PAGE = (
    b"<!DOCTYPE html>\n<html><head><title>Sign in</title></head><body><p>Sign in to continue.</p></body></html>\n"
)
"""What `serve_html` answers with."""


class ProviderSimulator:
    """A fake hosted-LLM server speaking the installed `openai` and `anthropic` clients' wire formats.

    Settings (plain attributes, read at each request): `reply`, `first_token_delay`, `token_delay`,
    `first_content_delay` (between a stream's opening events and its first content token; seconds),
    `prefill_delay_per_token` (seconds per uncached prompt token, added to the first delay),
    `anthropic_min_cache_tokens`, `tool_call` and `thinking` (see `shapes`), `reasoning_tokens`
    (hidden reasoning every reply spends first, out of the request's output cap, as reasoning models
    and extended thinking do: a reply left no room comes back empty, with the length finish).
    Scripting: `loop`, `fail`, `cut_stream_after`, `stall`, `inject_event`, `serve_html`, `hold`,
    `reset`, `advance_clock` (cache TTLs). Records: `requests`, `streams`. `GET /v1/models` is
    metadata, no model call: it is answered before any scripted fault and counted in
    `model_list_reads`, not recorded in `requests`; with `context_tokens` set its entries carry
    vLLM's `max_model_len` (unless `model_list` says the server lists no context, or has no such
    endpoint), and an OpenAI request whose prompt plus output limit exceed it gets vLLM's 400.
    Caches are written when an answer's prefill is over (before its first event or its JSON body),
    as the providers write theirs: a request that arrives during another's prefill misses.
    """

    def __init__(self) -> None:
        self.reply: str = DEFAULT_REPLY
        self.first_token_delay: float = 0.0
        self.token_delay: float = 0.0
        self.first_content_delay: float = 0.0
        self.prefill_delay_per_token: float = 0.0  # seconds per uncached prompt token, added to first_token_delay
        self.anthropic_min_cache_tokens: int = ANTHROPIC_MIN_CACHE_TOKENS
        self.reasoning_tokens: int = 0
        self.tool_call: str | None = None
        self.thinking: str = ""
        self.refuse_stream_options: bool = (
            False  # a 400 naming `stream_options`, as some OpenAI-compatible servers give
        )
        self.context_tokens: int | None = (
            None  # a vLLM-like context: listed in /v1/models, a 400 when prompt + limit exceed it
        )
        self.model_list: Literal["with_context", "without_context", "missing"] = "with_context"  # llama.cpp lists no
        # context; some servers have no GET /v1/models at all (a 404)
        self.model_list_reads: int = 0  # GET /v1/models answered (kept out of `requests`, never faulted)
        self._loop_unit: str | None = None
        self._faults = FaultQueue()
        self._requests: list[RecordedRequest] = []
        self._streams: list[StreamRecord] = []
        self._clock_offset = 0.0
        self._prefix_cache = PrefixCache(self._clock)
        self._breakpoint_cache = BreakpointCache(self._clock)
        self._activity = threading.Condition()
        self._in_flight = 0
        self._held = 0
        self._messages = MessagesApi()
        apis: list[GenerationEndpoint] = [ChatCompletionsApi(), ResponsesApi(), self._messages, CompletionsApi()]
        self._apis = {api.path: api for api in apis}
        self._server = LoopbackServer(self._handle)

    # -- lifecycle ---------------------------------------------------------------------------

    def __enter__(self) -> ProviderSimulator:
        self._server.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._server.stop()

    @property
    def openai_base_url(self) -> str:
        return f"http://{HOST}:{self._server.port}/v1"

    @property
    def anthropic_base_url(self) -> str:
        return f"http://{HOST}:{self._server.port}"

    # -- scripting ---------------------------------------------------------------------------

    def loop(self, unit: str | None) -> None:
        """From now on every reply repeats `unit` until the token cap or a hang-up; None ends it."""
        if unit is not None and not unit.strip():
            raise ValueError(f"loop unit must contain more than whitespace, got {unit!r} (None stops looping)")
        self._loop_unit = unit

    def fail(
        self,
        status: int = 429,
        *,
        times: int = 1,
        headers: Mapping[str, str] | None = None,
        message: str = "",
        error_type: str | None = None,
        reset: bool = False,
    ) -> None:
        """The next `times` requests fail: with `status` and the API's own error body (plus `headers`,
        e.g. `retry-after`), or, with `reset=True`, by a TCP reset before any answer."""
        fault: Fault = (
            ResetFault()
            if reset
            else ErrorFault(SimulatedError(status, message, error_type=error_type, headers=dict(headers or {})))
        )
        self._faults.add(fault, times)

    def cut_stream_after(self, n_tokens: int, *, mode: Literal["end", "drop", "reset"] = "end", times: int = 1) -> None:
        """The next `times` answers stop after `n_tokens` content tokens, without the final events.

        `mode` (see `faults.CutMode`): "end" ends the HTTP body properly (both clients then end the
        iteration silently), "drop" closes the connection mid-body, "reset" sends a TCP RST.
        A non-streamed answer under a cut sends half its JSON body.
        """
        self._faults.add(CutFault(n_tokens, CutMode(mode)), times)

    def stall(self, seconds: float, *, at_token: int = 0, times: int = 1) -> None:
        """The next `times` answers pause `seconds` more before content token `at_token` (0: before
        the first event or the JSON body): a client read timeout shorter than that trips once."""
        self._faults.add(StallFault(seconds, at_token), times)

    def inject_event(self, kind: Literal["bad_json", "unknown", "error"], *, at_token: int = 0, times: int = 1) -> None:
        """The next `times` streams carry a `kind` event just before content token `at_token`.

        `kind` (see `faults.EventKind`): "bad_json" a `data:` line with half its JSON, "unknown" an
        event type no API defines, "error" the API's own mid-stream error event, after which the body
        ends. A non-streamed answer under it is sent normally.
        """
        self._faults.add(EventFault(EventKind(kind), at_token), times)

    def serve_html(self, *, times: int = 1) -> None:
        """The next `times` requests get a 200 HTML page (`text/html`), whether they asked for a stream
        or not: what a proxy or captive portal in the way answers."""
        self._faults.add(HtmlFault(), times)

    def hold(
        self,
        release: threading.Event,
        *,
        status: int | None = None,
        times: int = 1,
        timeout: float = HOLD_TIMEOUT_SECONDS,
    ) -> None:
        """The next `times` answers stay in prefill (nothing sent, nothing cached) until `release` is
        set, then are served, or fail with `status`: a leader whose first chunk a test lets out."""
        self._faults.add(HoldFault(release, timeout, status), times)

    @property
    def held(self) -> int:
        """How many answers `hold` keeps in prefill right now (their cache lookups are done)."""
        with self._activity:
            return self._held

    def advance_clock(self, seconds: float) -> None:
        """Move the caches' clock on by `seconds`: entries whose TTL runs out in that time expire."""
        self._clock_offset += seconds

    def _clock(self) -> float:
        return time.monotonic() + self._clock_offset

    def reset(self) -> None:
        """Forget requests, streams, caches, scripted faults and loop mode; settings stay."""
        self.wait_idle()
        self._requests.clear()
        self.model_list_reads = 0
        self._streams.clear()
        self._prefix_cache.clear()
        self._breakpoint_cache.clear()
        self._messages.diagnoser.clear()
        self._faults.clear()
        self._loop_unit = None

    # -- records -----------------------------------------------------------------------------

    @property
    def requests(self) -> list[RecordedRequest]:
        """Every request received so far, in arrival order (a copy)."""
        return list(self._requests)

    @property
    def streams(self) -> list[StreamRecord]:
        """Every stream that has ended, in the order they ended (a copy).

        Waits (up to a few seconds) for requests still being answered, so a test that just closed
        a stream sees its record once the server noticed the hang-up.
        """
        self.wait_idle()
        return list(self._streams)

    def wait_idle(self, timeout: float = IDLE_WAIT_SECONDS) -> bool:
        """Wait until no request is being answered; False if that took longer than `timeout`."""
        with self._activity:
            return self._activity.wait_for(lambda: self._in_flight == 0, timeout)

    @contextmanager
    def _answering(self) -> Iterator[None]:
        with self._activity:
            self._in_flight += 1
        try:
            yield
        finally:
            with self._activity:
                self._in_flight -= 1
                self._activity.notify_all()

    # -- serving -----------------------------------------------------------------------------

    def _handle(self, exchange: Exchange) -> None:
        with self._answering():
            if exchange.method == "GET" and exchange.path == MODELS_PATH:  # a metadata read, no model call
                self.model_list_reads += 1
                flavour = _flavour_of(exchange)
                name, request_id = request_id_header(flavour)
                if self.model_list == "missing":
                    exchange.send_json(
                        404, SimulatedError(404, "Not Found").body(flavour, request_id), {name: request_id}
                    )
                    return
                context = self.context_tokens if self.model_list == "with_context" else None
                exchange.send_json(200, _models_list(flavour, context), {name: request_id})
                return
            self._requests.append(
                RecordedRequest(
                    exchange.method, exchange.path, exchange.headers, _parse_json(exchange.raw), exchange.raw
                )
            )
            exchange.path, exchange.raw = platforms.route(exchange.path, exchange.raw)
            api = self._apis.get(exchange.path)
            flavour = api.flavour if api else _flavour_of(exchange)
            try:
                self._serve(exchange, api, flavour, self._faults.take())
            except SimulatedError as error:
                header, request_id = request_id_header(flavour)
                exchange.send_json(error.status, error.body(flavour, request_id), {header: request_id, **error.headers})

    def _serve(self, exchange: Exchange, api: GenerationEndpoint | None, flavour: Flavour, fault: Fault | None) -> None:
        match fault:
            case ResetFault():
                exchange.drop(reset=True)
                return
            case ErrorFault(error):
                raise error
            case HtmlFault():
                exchange.send(200, HTML_PAGE, {"Content-Type": "text/html; charset=utf-8"})
                return
        if (answer := instant.ROUTES.get(exchange.path)) is not None and exchange.method == "POST":
            exchange.send_json(200, answer(_parse_json(exchange.raw) or {}), dict([request_id_header(flavour)]))
            return
        if api is None or exchange.method != "POST":
            raise SimulatedError(404, f"Invalid URL ({exchange.method} {exchange.path})")
        body = _parse_json(exchange.raw)
        if not isinstance(body, dict):
            raise SimulatedError(400, "The request body is not a JSON object.")
        if self.refuse_stream_options and flavour is Flavour.OPENAI and "stream_options" in body:
            raise SimulatedError(400, "Unrecognized request argument supplied: stream_options", param="stream_options")
        job = api.parse(body)
        params = job.decode
        if self.context_tokens is not None and flavour is Flavour.OPENAI and params.max_tokens is not None:
            _check_context(len(job.prompt), params.max_tokens, self.context_tokens)
        if self.reasoning_tokens and params.max_tokens is not None:
            params = replace(params, max_tokens=max(params.max_tokens - self.reasoning_tokens, 0))
        decoded = decode(self.reply, self._loop_unit, params, DEFAULT_MAX_OUTPUT_TOKENS)
        outcome = ServedJob(job, self._lookup(flavour, job), decoded)
        cut = fault if isinstance(fault, CutFault) else None
        prefill_s = self.prefill_delay_per_token * (outcome.prompt_tokens - outcome.cache.read)
        timing = Timing(
            self.first_token_delay + prefill_s,
            self.token_delay,
            fault if isinstance(fault, StallFault) else None,
            self.first_content_delay,
        )
        headers = dict([request_id_header(flavour)])
        if isinstance(fault, HoldFault):
            with self._activity:
                self._held += 1
            try:
                fault.release.wait(fault.timeout)
            finally:
                with self._activity:
                    self._held -= 1
            if fault.status is not None:
                raise SimulatedError(fault.status)
        cache = self._prefix_cache if flavour is Flavour.OPENAI else self._breakpoint_cache
        encoder = shaped_encoder(api.encoder(outcome), outcome, self.tool_call, self.thinking)
        if isinstance(api, MessagesApi) and isinstance(encoder, MessagesEncoder):
            encoder.diagnostics = api.diagnoser.answer(job, encoder.message_id)
        try:
            if job.stream:
                inject = injection(fault, encoder, flavour) if isinstance(fault, EventFault) else None
                tokens = stream_tokens(encoder, self.thinking, decoded.tokens)
                self._streams.append(
                    send_stream(
                        exchange, encoder, tokens, headers, timing, cut, inject, lambda: cache.commit(outcome.cache)
                    )
                )
            else:
                send_whole(exchange, encoder, headers, timing, cut, lambda: cache.commit(outcome.cache))
        finally:
            cache.commit(outcome.cache)  # also when the client hung up during the prefill

    def _lookup(self, flavour: Flavour, job: Job) -> CacheUse:
        if flavour is Flavour.OPENAI:
            return self._prefix_cache.lookup(job.model, job.prompt)
        return self._breakpoint_cache.lookup(job.model, job.prompt, self.anthropic_min_cache_tokens)


def _parse_json(raw: bytes) -> Any:
    try:
        return json.loads(raw) if raw else None
    except ValueError:
        return None


def _flavour_of(exchange: Exchange) -> Flavour:
    """For paths shared or unknown: Anthropic's client always sends `anthropic-version`."""
    return Flavour.ANTHROPIC if "anthropic-version" in exchange.headers else Flavour.OPENAI


def _check_context(prompt_tokens: int, max_tokens: int, context: int) -> None:
    """vLLM's refusal of a request whose prompt and output limit together exceed the context."""
    if prompt_tokens + max_tokens > context:
        raise SimulatedError(
            400,
            f"This model's maximum context length is {context} tokens. However, you requested "
            f"{prompt_tokens + max_tokens} tokens ({prompt_tokens} in the messages, {max_tokens} in the "
            "completion). Please reduce the length of the messages or completion.",
        )


def _models_list(flavour: Flavour, context: int | None) -> dict[str, Any]:
    if flavour is Flavour.ANTHROPIC:
        data = [
            {"type": "model", "id": model, "display_name": model, "created_at": "2025-01-01T00:00:00Z"}
            for model in DEFAULT_MODELS
        ]
        return {"data": data, "has_more": False, "first_id": data[0]["id"], "last_id": data[-1]["id"]}
    listed: list[dict[str, Any]] = [
        {"id": model, "object": "model", "created": now(), "owned_by": "simulator"} for model in DEFAULT_MODELS
    ]
    if context is not None:
        listed = [{**item, "max_model_len": context} for item in listed]
    return {"object": "list", "data": listed}
