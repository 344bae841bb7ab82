"""Servers that refuse `stream_options`: the usage request kvwise adds is taken back, never a failed call.

kvwise asks a Chat (or legacy Completions) stream for its usage with `stream_options.include_usage`
when the caller did not (`openai_chat.add_stream_usage`). Some OpenAI-compatible servers refuse the
field with a 400 (or 422) that the bare client's request would not get. When the first attempt of
a call whose `stream_options` kvwise added by itself is refused so (the error names the field), the
call is sent again once as the caller wrote it, and the server is remembered for the wrapped client:
its later streams are sent without the field. Such a stream's usage is an estimate, marked
`kvwise.usage.estimated` on its span.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import Any

from sdk.adapters.openai_chat import STREAM_USAGE_REFUSED, STREAM_USAGE_REQUESTED
from sdk.call import Api, Call
from sdk.telemetry import semconv as sc

FIELD = "stream_options"
_REFUSAL_STATUSES = frozenset({400, 422})
_APIS = frozenset({Api.CHAT, Api.COMPLETIONS})  # the APIs whose streams kvwise asks for usage


class Refusals:
    """The servers (`(host, port)`) a wrapped client has seen refuse `stream_options`."""

    __slots__ = ("_servers",)

    def __init__(self) -> None:
        self._servers: set[Hashable] = set()

    def mark(self, call: Call, server: Hashable) -> None:
        """Before the call is rewritten into its request: no usage request to a server that refuses it."""
        if call.stream and call.api in _APIS and server in self._servers:
            call.changes.append(STREAM_USAGE_REFUSED)

    def take_back(self, error: BaseException, call: Call, server: Hashable, post_kwargs: dict[str, Any], span: Any) -> bool:
        """Whether `error` refused the `stream_options` kvwise added by itself; if so, `post_kwargs`
        now sends the caller's request, the call and its span say so, and the server is remembered."""
        body = post_kwargs.get("body")
        if not (_added_by_kvwise(call) and isinstance(body, Mapping) and FIELD in body and _names_the_field(error)):
            return False
        post_kwargs["body"] = {key: value for key, value in body.items() if key != FIELD}
        call.changes[call.changes.index(STREAM_USAGE_REQUESTED)] = STREAM_USAGE_REFUSED
        self._servers.add(server)
        if span is not None and span.is_recording():
            span.set_attribute(sc.KVWISE_CANONICAL_CHANGES, tuple(call.changes))
        return True


def _added_by_kvwise(call: Call) -> bool:
    """Whether the request's `stream_options` is kvwise's alone: the caller sent none, named or in `extra_body`."""
    extra = call.params.get("extra_body")
    return STREAM_USAGE_REQUESTED in call.changes and FIELD not in call.params and not (isinstance(extra, Mapping) and FIELD in extra)


def _names_the_field(error: BaseException) -> bool:
    """A 400/422 answer whose message names `stream_options` (the client's error text holds the body)."""
    return getattr(error, "status_code", None) in _REFUSAL_STATUSES and FIELD in str(error)
