"""Sending one outcome: as a whole JSON body or as an SSE stream, token by token.

Both paths share the timing rules (`Timing`): `first_token_delay` passes before anything of the body
(for SSE, after the headers and before the first event); `token_delay` passes between content
tokens; a scripted stall adds to one of those pauses. While waiting, and before each token, the
client's socket is polled, so a client that hangs up stops the "decode" at once; `StreamRecord`
tells how far it got. A scripted `EventFault` slips its `Injection` in before one token.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from .errors import Flavour, SimulatedError, request_id_header
from .faults import CutFault, CutMode, EventFault, EventKind, StallFault
from .records import StreamRecord
from .server import Exchange
from .wire import Encoder, SseEvent

UNKNOWN_EVENT_TYPE = "simulator.unknown"
"""Event name and `type` of `EventKind.UNKNOWN`: defined by no API."""
STREAM_ERROR_STATUS = 529
"""The error an `EventKind.ERROR` event reports: "overloaded", the mid-stream error Anthropic documents."""


@dataclass(frozen=True, slots=True)
class Timing:
    """The pauses of one answer: the simulator's delays plus a scripted stall, if any."""

    first_token_delay: float
    token_delay: float
    stall: StallFault | None = None
    first_content_gap: float = 0.0
    """Seconds between a stream's opening events (role chunk, `message_start`) and its first content token."""

    def before(self, index: int) -> float:
        """Seconds to wait before content token `index` (0: before the first event or the JSON body)."""
        base = self.first_token_delay if index == 0 else self.token_delay
        return base + (self.stall.seconds if self.stall and self.stall.at_token == index else 0.0)


@dataclass(frozen=True, slots=True)
class Injection:
    """Events written just before content token `at_token` (after the last one when the reply is
    shorter); `ends`: the HTTP body then ends properly, with no more tokens and no final events."""

    at_token: int
    events: tuple[SseEvent, ...]
    ends: bool


def injection(fault: EventFault, encoder: Encoder, flavour: Flavour) -> Injection:
    """The events an `EventFault` slips into a stream, framed as the API frames its own."""
    match fault.kind:
        case EventKind.BAD_JSON:
            whole = encoder.token(" lost")[0]
            events = (SseEvent(whole.data[: len(whole.data) // 2], whole.event),)
        case EventKind.UNKNOWN:
            events = (SseEvent.of({"type": UNKNOWN_EVENT_TYPE}, UNKNOWN_EVENT_TYPE),)
        case EventKind.ERROR:
            body = SimulatedError(STREAM_ERROR_STATUS).body(flavour, request_id_header(flavour)[1])
            events = (SseEvent.of(body, "error" if flavour is Flavour.ANTHROPIC else None),)
    return Injection(fault.at_token, events, ends=fault.kind is EventKind.ERROR)


def send_whole(
    exchange: Exchange,
    encoder: Encoder,
    headers: Mapping[str, str],
    timing: Timing,
    cut: CutFault | None,
    prefilled: Callable[[], None] = lambda: None,
) -> None:
    """The JSON answer; under a cut, only its first half (framing per `cut.mode`). `prefilled` is
    called once the prefill is over (the first-token delay), before anything of the body."""
    if exchange.hung_up(timing.before(0)):
        return
    prefilled()
    if cut is None:
        exchange.send_json(200, encoder.complete(), headers)
        return
    payload = json.dumps(encoder.complete(), separators=(",", ":")).encode()
    half = payload[: len(payload) // 2]
    declared = len(half) if cut.mode is CutMode.END else len(payload)
    if exchange.send(200, half, {"Content-Type": "application/json", **_closing(headers)}, declared_length=declared):
        exchange.drop(reset=cut.mode is CutMode.RESET)


def send_stream(
    exchange: Exchange,
    encoder: Encoder,
    tokens: tuple[str, ...],
    headers: Mapping[str, str],
    timing: Timing,
    cut: CutFault | None,
    inject: Injection | None = None,
    prefilled: Callable[[], None] = lambda: None,
) -> StreamRecord:
    """The SSE answer, `tokens` one by one; returns what was sent and whether the client hung up first.
    `prefilled` is called once the prefill is over (the first-token delay), before the first event."""
    progress = _Progress(exchange)
    if inject is not None and inject.ends:
        cut = CutFault(inject.at_token, CutMode.END)
    if cut is not None:
        tokens, headers = tokens[: cut.after_tokens], _closing(headers)
    if not exchange.start_stream(headers) or exchange.hung_up(timing.before(0)):
        progress.client_closed = True
    else:
        prefilled()
        if progress.write(encoder.opening()) and progress.write_tokens(encoder, tokens, timing, inject):
            _finish(exchange, encoder, progress, cut)
    return StreamRecord(
        path=exchange.path,
        tokens_sent=progress.tokens,
        events_sent=progress.events,
        client_closed=progress.client_closed,
        completed=progress.completed,
    )


def _closing(headers: Mapping[str, str]) -> dict[str, str]:
    """`headers` of an answer after which the connection is closed: saying so keeps a client from
    sending its next request (an immediate retry) on a connection that is about to go."""
    return {**headers, "Connection": "close"}


def _finish(exchange: Exchange, encoder: Encoder, progress: _Progress, cut: CutFault | None) -> None:
    """After the last token: the final events and the end of the body, or the scripted cut."""
    if cut is None:
        progress.completed = progress.write(encoder.closing()) and exchange.end_stream()
        progress.client_closed = not progress.completed
    elif cut.mode is CutMode.END:
        exchange.end_stream()
        exchange.drop(reset=False)
    else:
        exchange.drop(reset=cut.mode is CutMode.RESET)


class _Progress:
    """Counts what reached the socket; notes when the client turns out to be gone."""

    def __init__(self, exchange: Exchange) -> None:
        self._exchange = exchange
        self.tokens = 0
        self.events = 0
        self.completed = False
        self.client_closed = False

    def write(self, events: Iterable[SseEvent]) -> bool:
        batch = list(events)
        if not batch:  # an empty chunk would end the HTTP body
            return True
        if self._exchange.write_chunk(b"".join(event.encode() for event in batch)):
            self.events += len(batch)
            return True
        self.client_closed = True
        return False

    def write_tokens(self, encoder: Encoder, tokens: tuple[str, ...], timing: Timing, inject: Injection | None) -> bool:
        """One batch of events per token, paced by `timing`, with `inject` in its place; True when
        all were sent."""
        for index, token in enumerate(tokens):
            if self._exchange.hung_up(timing.before(index) if index else timing.first_content_gap):
                self.client_closed = True
                return False
            if inject is not None and inject.at_token == index and not self.write(inject.events):
                return False
            if not self.write(encoder.token(token)):
                return False
            self.tokens += 1
        if inject is not None and inject.at_token >= len(tokens):
            return self.write(inject.events)
        return True
