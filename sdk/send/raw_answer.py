"""A raw response's bookkeeping done when its caller reads it, never before.

A `with_raw_response` / `with_streaming_response` call hands the caller the client's own response
object, whose body the bare client leaves to the caller: it may `parse()` it, read its bytes, lines
or text, or close it unread. kvwise reads nothing of it itself. Its `parse` is hooked on the
instance (its type stays the client's): the first `parse()` into the call's own type does the
bookkeeping of the parsed answer (usage, id, client-side stops, the span's end) before the caller
gets it. A close before that (`with` exit, `iter_*` to the end, `close()`), or the caller dropping
the response, ends the call with what is known. The hooks hold no reference to the response (its
`parse` runs on a shallow twin sharing the HTTP response and the parse cache, the close hook holds
weak references, as `sdk.send.stream_proxy` does), so a dropped response is freed by reference
counting alone, and `create(...).parse()` still parses once the response itself is gone.
"""

from __future__ import annotations

import copy
import inspect
import logging
import weakref
from collections.abc import Callable
from typing import Any

logger = logging.getLogger(__name__)

Parsed = Callable[[Any, Exception | None], None]


class _Pending:
    """One raw response's bookkeeping, done once: `parsed` with the caller's answer, else `unread`."""

    __slots__ = ("__weakref__", "done", "parsed", "parsing", "unread")

    def __init__(self, parsed: Parsed, unread: Callable[[], None]) -> None:
        self.parsed, self.unread = parsed, unread
        self.done = self.parsing = False

    def answer(self, value: Any, error: Exception | None) -> None:
        """The caller's parse into the call's type gave `value` or raised `error`."""
        if not self.done:
            self.done = True
            _quietly(self.parsed, value, error)

    def parsed_to(self, to: Any, value: Any, error: Exception | None) -> None:
        """A parse by the caller ended (`value` or `error`); one into the call's own type (`to` None) answers."""
        self.parsing = False
        if to is None:
            self.answer(value, error)

    def close(self) -> None:
        """The response closed or was dropped: unless a parse in progress closed it (a read to the end)."""
        if not self.done and not self.parsing:
            self.done = True
            _quietly(self.unread)


def _quietly(step: Callable[..., None], *args: Any) -> None:
    """kvwise's bookkeeping inside the caller's read: its own errors are logged, never raised."""
    try:
        step(*args)
    except Exception:
        logger.debug("kvwise: the bookkeeping of a raw response failed", exc_info=True)


def defer(raw: Any, parsed: Parsed, unread: Callable[[], None]) -> None:
    """Hook `raw` (the client's raw response) so that `parsed(answer, error)` runs at the caller's
    first `parse()` into the call's type (what it returned or raised), or `unread()` at its close
    or drop before that."""
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
            pending.parsed_to(to, value, None)
            return value

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
            pending.parsed_to(to, value, None)
            return value

        raw.parse = parse
    _hook_close(raw.http_response, pending)
    weakref.finalize(twin, pending.close)  # lives as long as the hooked `parse`: `raw`'s, or the caller's


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
