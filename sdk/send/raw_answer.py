"""A raw response's bookkeeping done when its caller reads it, never before.

A `with_raw_response` / `with_streaming_response` call hands the caller the client's own response
object, whose body the bare client leaves to the caller: it may `parse()` it, read its bytes, lines
or text, or close it unread. kvwise reads nothing of it itself, a streamed one included (its stream
is not even built until the caller asks). Its `parse` is hooked on the instance (its type stays the
client's): the first `parse()` into the call's own type does the bookkeeping of the parsed answer
(usage, id, client-side stops, the span's end), or for a stream hands back kvwise's watched stream
(cached, as the client caches its parse), before the caller gets it. A close before that (`with`
exit, `iter_*` to the end, `close()`), or the caller dropping the response, ends the call with what
is known. The hooks hold no reference to the response (its `parse` runs on a shallow twin sharing
the HTTP response and the parse cache, the close hook holds weak references, as
`sdk.send.stream_proxy` does), so a dropped response is freed by reference counting alone, and
`create(...).parse()` still parses once the response itself is gone.
"""

from __future__ import annotations

import copy
import inspect
import logging
import weakref
from collections.abc import Callable
from typing import Any

from sdk import compat

logger = logging.getLogger(__name__)

Parsed = Callable[[Any, Exception | None], Any]
"""The bookkeeping of the caller's parse (what it gave, or raised): what the caller gets instead."""


class _Pending:
    """One raw response's bookkeeping, done once: `parsed` with the caller's answer, else `unread`."""

    __slots__ = ("__weakref__", "done", "parsed", "parsing", "unread")

    def __init__(self, parsed: Parsed, unread: Callable[[], None]) -> None:
        self.parsed, self.unread = parsed, unread
        self.done = self.parsing = False

    def answer(self, value: Any, error: Exception | None) -> Any:
        """The caller's parse into the call's type gave `value` or raised `error`: what the caller gets."""
        if self.done:
            return value
        self.done = True
        return _quietly(self.parsed, value, error, default=value)

    def parsed_to(self, to: Any, value: Any, error: Exception | None) -> Any:
        """A parse by the caller ended (`value` or `error`); one into the call's own type (`to` None)
        answers. What the caller gets."""
        self.parsing = False
        return self.answer(value, error) if to is None else value

    def close(self) -> None:
        """The response closed or was dropped: unless a parse in progress closed it (a read to the end)."""
        if not self.done and not self.parsing:
            self.done = True
            _quietly(self.unread)


def _quietly(step: Callable[..., Any], *args: Any, default: Any = None) -> Any:
    """kvwise's bookkeeping inside the caller's read: its own errors are logged, never raised
    (`default` is then what the caller gets)."""
    try:
        return step(*args)
    except Exception:
        logger.debug("kvwise: the bookkeeping of a raw response failed", exc_info=True)
        return default


def defer(raw: Any, parsed: Parsed, unread: Callable[[], None]) -> None:
    """Hook `raw` (the client's raw response) so that `parsed(answer, error)` runs at the caller's
    first `parse()` into the call's type (what it returned or raised; the caller gets what it
    returns, and so does every later parse), or `unread()` at its close or drop before that."""
    pending = _Pending(parsed, unread)
    twin = copy.copy(raw)  # parses for the hook; shares the response and the parse cache, holds no `raw`
    cls_parse = type(raw).parse
    if inspect.iscoroutinefunction(cls_parse):

        async def aparse(*, to: Any = None) -> Any:
            pending.parsing = True
            try:
                value = await cls_parse(twin, to=to)
            except Exception as error:
                pending.parsed_to(to, None, error)
                raise
            finally:
                pending.parsing = False  # a cancellation too
            return _cached(twin, value, pending.parsed_to(to, value, None))

        raw.parse = aparse
    else:

        def parse(*, to: Any = None) -> Any:
            pending.parsing = True
            try:
                value = cls_parse(twin, to=to)
            except Exception as error:
                pending.parsed_to(to, None, error)
                raise
            finally:
                pending.parsing = False  # a cancellation too
            return _cached(twin, value, pending.parsed_to(to, value, None))

        raw.parse = parse
    _hook_close(raw.http_response, pending)
    weakref.finalize(twin, pending.close)  # lives as long as the hooked `parse`: `raw`'s, or the caller's


def _cached(raw: Any, parsed: Any, given: Any) -> Any:
    """`given`, what the caller gets for the answer `parsed`; where that is another object (a watched
    stream), what `raw.parse()` gives from now on, in the client's own parse cache (shared by `raw`
    and its twin)."""
    if given is not parsed:
        compat.cache_parsed(raw, given)
    return given


def _hook_close(response: Any, pending: _Pending) -> None:
    """The HTTP response's own `close` / `aclose` end the call unread (what `with` exit, a read to
    the end and the raw response's `close()` come down to); a body already read has closed."""
    if response.is_closed:
        return
    own, owner = weakref.ref(response), weakref.ref(pending)

    def close() -> None:
        if (waiting := owner()) is not None:
            waiting.close()
        if (closing := own()) is not None:
            type(closing).close(closing)

    async def aclose() -> None:
        if (waiting := owner()) is not None:
            waiting.close()
        if (closing := own()) is not None:
            await type(closing).aclose(closing)

    response.close, response.aclose = close, aclose
