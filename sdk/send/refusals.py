"""What kvwise adds that a server refuses is taken back: never a 400 the bare client would not get.

kvwise adds to some requests what the caller did not write: a stream's usage request
(`sdk.send.stream_options.STREAM_USAGE`) and an output limit, filled in or clamped
(`sdk.decode.limits.OUTPUT_LIMIT`). A server may refuse either with a 400 (or 422) the caller's own request
would not get. When an answer refuses one that kvwise alone put in the request (the error's text
names it), the call is sent again with that addition as the caller wrote it, the call's changes
and span say so, and the server is remembered for the wrapped client: its later calls are sent
without that addition (`Refusals.mark`). Each addition is taken back at most once per call.

A wrapped client also keeps here what it has read of its servers' model contexts
(`sdk.decode.model_context`), which decide whether a filled limit fits before it is sent.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import Any, Protocol

from sdk.call import Call
from sdk.decode.limits import OUTPUT_LIMIT
from sdk.decode.model_context import ModelContexts
from sdk.send.stream_options import STREAM_USAGE
from sdk.telemetry import semconv as sc

_REFUSAL_STATUSES = frozenset({400, 422})


class Addition(Protocol):
    """Something kvwise adds to a request and some servers refuse."""

    name: str  # what the server is remembered to refuse
    span_flag: str | None  # a boolean span attribute set when it is taken back

    def added(self, call: Call, post_kwargs: Mapping[str, Any]) -> bool:
        """Whether the request about to be sent carries it, put there by kvwise alone."""
        ...

    def named_by(self, message: str) -> bool:
        """Whether an error answer's text names it."""
        ...

    def take_back(self, call: Call, post_kwargs: dict[str, Any]) -> None:
        """Make `post_kwargs` send it as the caller wrote it, and `call` say so."""
        ...

    def withhold(self, call: Call) -> None:
        """Before `call` is rewritten into its request: do not add it (the server refuses it)."""
        ...


ADDITIONS: tuple[Addition, ...] = (STREAM_USAGE, OUTPUT_LIMIT)


class Refusals:
    """Per wrapped client: which additions each server (`(host, port)`) refused, and the servers'
    model contexts."""

    __slots__ = ("_refused", "contexts")

    def __init__(self) -> None:
        self._refused: set[tuple[str, Hashable]] = set()
        self.contexts = ModelContexts()

    def mark(self, call: Call, server: Hashable) -> None:
        """Before the call is rewritten into its request: none of what `server` refused is added."""
        if not self._refused:
            return
        for addition in ADDITIONS:
            if (addition.name, server) in self._refused:
                addition.withhold(call)

    def take_back(
        self, error: BaseException, call: Call, server: Hashable, post_kwargs: dict[str, Any], span: Any
    ) -> bool:
        """Whether `error` refused an addition kvwise made by itself; if so, `post_kwargs` now sends
        it as the caller wrote it, the call and its span say so, and the server is remembered."""
        if getattr(error, "status_code", None) not in _REFUSAL_STATUSES:
            return False
        message = str(error)  # the clients' error text holds the answer's body
        for addition in ADDITIONS:
            if addition.added(call, post_kwargs) and addition.named_by(message):
                addition.take_back(call, post_kwargs)
                self._refused.add((addition.name, server))
                if span is not None and span.is_recording():
                    span.set_attribute(sc.KVWISE_CANONICAL_CHANGES, tuple(call.decided.changes))
                    if addition.span_flag is not None:
                        span.set_attribute(addition.span_flag, True)
                return True
        return False
