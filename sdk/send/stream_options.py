"""Servers that refuse `stream_options`: the usage request kvwise adds is taken back, never a failed call.

kvwise asks a Chat (or legacy Completions) stream for its usage with `stream_options.include_usage`
when the caller did not (`openai_chat.add_stream_usage`). Some OpenAI-compatible servers refuse the
field with a 400 (or 422) that the bare client's request would not get. `STREAM_USAGE` is that
addition as `sdk.send.refusals` takes it back: a call whose `stream_options` kvwise added by itself and
that is refused so (the error names the field) is sent again once as the caller wrote it, and the
server is remembered for the wrapped client: its later streams are sent without the field. Such a
stream's usage is an estimate, marked `kvwise.usage.estimated` on its span.
"""

from __future__ import annotations

from collections.abc import Mapping

from sdk import compat
from sdk.call import STREAM_USAGE_REFUSED, STREAM_USAGE_REQUESTED, Api, Call

FIELD = "stream_options"
_APIS = frozenset({Api.CHAT, Api.COMPLETIONS})  # the APIs whose streams kvwise asks for usage


class StreamUsage:
    """The `stream_options` kvwise adds to a stream, as an addition a server may refuse (`sdk.send.refusals`)."""

    name = FIELD

    def added(self, call: Call, request: compat.Request) -> bool:
        """Whether the request's `stream_options` is kvwise's alone: the caller sent none, named or in `extra_body`."""
        body, extra = request.body, compat.extra_body_of(call.params)
        return (
            isinstance(body, Mapping)
            and FIELD in body
            and call.decided.stream_usage_added
            and FIELD not in call.params
            and not (extra is not None and FIELD in extra)
        )

    def named_by(self, message: str) -> bool:
        return FIELD in message

    def take_back(self, call: Call, request: compat.Request) -> None:
        request.body = {key: value for key, value in request.body.items() if key != FIELD}
        call.decided.stream_usage_added, call.decided.stream_usage_refused = False, True
        call.decided.changes[call.decided.changes.index(STREAM_USAGE_REQUESTED)] = STREAM_USAGE_REFUSED

    def withhold(self, call: Call) -> None:
        """Before the call is rewritten into its request: no usage request to a server that refuses it."""
        if call.stream and call.api in _APIS:
            call.decided.stream_usage_refused = True
            call.decided.changes.append(STREAM_USAGE_REFUSED)


STREAM_USAGE = StreamUsage()
