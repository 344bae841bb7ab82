"""`sdk.conversation(id)`: name the conversation the calls inside belong to (`gen_ai.conversation.id`).

    with sdk.conversation("support-ticket-4711"):
        client.messages.create(...)          # its span carries gen_ai.conversation.id
        await asyncio.gather(turn(a), turn(b))   # so do the calls of tasks started inside

The id lives in a `contextvars.ContextVar`, so it follows the code that set it and nothing else:
each thread and each asyncio task sees the id current where it was started (tasks copy the
context), and two conversations running at once never see each other's id. Blocks nest; leaving
one restores the outer id.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

_CURRENT: ContextVar[str | None] = ContextVar("kvwise_conversation_id", default=None)


@contextmanager
def conversation(conversation_id: str) -> Iterator[str]:
    """Set `gen_ai.conversation.id` to `conversation_id` on every call made inside the block.

    >>> with sdk.conversation("thread-42"):
    ...     client.chat.completions.create(model="gpt-5.6", messages=[...])
    """
    if not isinstance(conversation_id, str) or not conversation_id:
        raise ValueError(f"conversation id must be a non-empty string, got {conversation_id!r}")
    token = _CURRENT.set(conversation_id)
    try:
        yield conversation_id
    finally:
        _CURRENT.reset(token)


def current_conversation() -> str | None:
    """The conversation id of the calling context (None outside any `sdk.conversation` block)."""
    return _CURRENT.get()
