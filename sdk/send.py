"""One kvwise send: the client's own request, under kvwise's retries, telemetry and stream guard.

`Sender.post` stands in for a resource's `_post` (see `sdk.compat.with_send`): the client's method
(`create`, `parse`, a stream helper, a `with_raw_response` form) builds its request as usual and
hands it here. Each attempt goes through the live client's `post` with the client's own retries
off and the attempt's `x-stainless-retry-count`; one CLIENT span covers the attempts; a stream comes
back guarded, and a raw response comes back as the client's own object whose `.parse()` gives the
parsed (or guarded) result kvwise recorded.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sdk import compat
from sdk.adapters import adapter_for
from sdk.adapters._base import timings_of
from sdk.call import Call
from sdk.errors import client_error
from sdk.policy import Policy
from sdk.retry import Attempts, acall_with_retries, call_with_retries
from sdk.stream import StreamWatch, guard_async, guard_sync
from sdk.surface import Kind
from sdk.telemetry import CallRecord, Telemetry
from sdk.telemetry.attributes import response_facts

Server = tuple[str | None, int | None]


@dataclass(slots=True)
class Sender:
    """The send of one prepared call through the live client `client` (sync or async `post`)."""

    call: Call
    kind: Kind
    client: Any
    server: Server
    policy: Policy
    telemetry: Telemetry
    connection_error: type[Exception]

    def _start(self, path: str, post_kwargs: dict[str, Any]) -> tuple[CallRecord, Attempts, Callable[[], Any]]:
        if post_kwargs.get("stream") and not self.call.stream:
            self.call.params["stream"] = True  # a stream helper says so only to `post`
        record = self.telemetry.start(self.call, self.server)
        attempts = Attempts(self.policy.retries, record.attempt)
        options = post_kwargs.get("options")

        def send() -> Any:
            return self.client.post(path, **{**post_kwargs, "options": compat.attempt_options(options, attempts.made - 1)})

        return record, attempts, send

    def post(self, path: str, **post_kwargs: Any) -> Any:
        """The sync client's `post(path, ...)`, sent the kvwise way."""
        record, attempts, send = self._start(path, post_kwargs)
        raw = compat.raw_mode(post_kwargs.get("options"))
        try:
            with record.activate():
                result = call_with_retries(send, attempts)
        except BaseException as error:
            raise self._failed(record, error)
        parsed = result.parse() if raw else result
        if self.call.stream:
            watch = StreamWatch(adapter_for(self.call.api), self.call, self.policy, record, attempts)
            reopen = (lambda: call_with_retries(send, attempts).parse()) if raw else (lambda: call_with_retries(send, attempts))
            guarded = guard_sync(parsed, watch, reopen)
            return self._raw_with(result, guarded) if raw else guarded
        finish(self.call, self.kind, parsed, record)
        return result

    async def apost(self, path: str, **post_kwargs: Any) -> Any:
        """The async client's `post(path, ...)`, sent the kvwise way."""
        record, attempts, send = self._start(path, post_kwargs)
        raw = compat.raw_mode(post_kwargs.get("options"))
        try:
            with record.activate():
                result = await acall_with_retries(send, attempts)
        except BaseException as error:
            raise self._failed(record, error)
        parsed = await _parse(result) if raw else result
        if self.call.stream:
            watch = StreamWatch(adapter_for(self.call.api), self.call, self.policy, record, attempts)

            async def reopen() -> Any:
                reopened = await acall_with_retries(send, attempts)
                return await _parse(reopened) if raw else reopened

            guarded = guard_async(parsed, watch, reopen)
            return self._raw_with(result, guarded) if raw else guarded
        finish(self.call, self.kind, parsed, record)
        return result

    @staticmethod
    def _raw_with(raw: Any, guarded: Any) -> Any:
        compat.cache_parsed(raw, guarded)
        return raw

    def _failed(self, record: CallRecord, error: BaseException) -> BaseException:
        """End the telemetry of a call whose attempts all failed; return what the caller gets."""
        failure = client_error(error, functools.partial(compat.connection_error, self.connection_error))
        record.end(error=failure)
        return failure


async def _parse(raw: Any) -> Any:
    """`raw.parse()`: a coroutine on the async clients' raw responses, a value on openai's legacy one."""
    parsed = raw.parse()
    return await parsed if inspect.isawaitable(parsed) else parsed


def finish(call: Call, kind: Kind, response: Any, record: CallRecord) -> None:
    """End the span of a call that was not streamed: client-side stops and usage for a model call,
    the id alone for a token count or a batch (no model output yet)."""
    if kind is not Kind.CALL:
        call.learn_response = None  # a batch's or a count's id is no message a later call can name
        record.end(response_id=getattr(response, "id", None))
        return
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
        **response_facts(response),
    )
