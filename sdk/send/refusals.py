"""What kvwise adds that a server refuses is taken back: never a 400 the bare client would not get.

kvwise adds to some requests what the caller did not write: a stream's usage request
(`sdk.send.stream_options.STREAM_USAGE`) and an output limit, filled in or clamped
(`sdk.decode.limits.OUTPUT_LIMIT`). A server may refuse either with a 400 (or 422) the caller's own request
would not get. When an answer refuses one that kvwise alone put in the request (the error's text
names it), the call is sent again with that addition as the caller wrote it (`TakeBack`, the
decision of `sdk.send.attempts`), the call's decisions say so (its span, at its end), and it is remembered: a
server that refused the usage request gets none from this wrapped client again (`Refusals.mark`),
and the context a refused limit names is remembered for the base URL and model, in the wrapped
client's state store too, so the next call's limit fits it (`Refusals.context`,
`sdk.decode.limits.fit_to_context`); where the refusal names no
context, that model there gets no limit of kvwise's again. Each addition is taken back at most once
per call. No request is ever made to learn a context: only the caller's own calls teach it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any, Protocol

from sdk import compat
from sdk.call import Call
from sdk.decode.limits import OUTPUT_LIMIT, ContextLimit
from sdk.memory.store import Store
from sdk.send.stream_options import STREAM_USAGE

_REFUSAL_STATUSES = frozenset({400, 422})


class Addition(Protocol):
    """Something kvwise adds to a request and some servers refuse."""

    name: str  # what the server is remembered to refuse

    def added(self, call: Call, request: compat.Request) -> bool:
        """Whether the request about to be sent carries it, put there by kvwise alone."""
        ...

    def named_by(self, message: str) -> bool:
        """Whether an error answer's text names it."""
        ...

    def take_back(self, call: Call, request: compat.Request) -> None:
        """Make `request` send it as the caller wrote it, and `call`'s decisions say so."""
        ...


class Withheld(Addition, Protocol):
    """An addition a server that refused it once is never sent again."""

    def withhold(self, call: Call) -> None:
        """Before `call` is rewritten into its request: do not add it (the server refuses it)."""
        ...


WITHHELD: tuple[Withheld, ...] = (STREAM_USAGE,)
ADDITIONS: tuple[Addition, ...] = (*WITHHELD, OUTPUT_LIMIT)


_CONTEXT_KIND = "context"
"""The kind of value (`Store.update_value`) a learnt context is kept as: its tokens, "" for none named."""


def _where(client: Any, model: str) -> tuple[str, str]:
    """(base URL, model): where a context is learnt."""
    return str(compat.base_url(client)), model


def _key(where: tuple[str, str]) -> bytes:
    """The store's key of a base URL and model (hashed: the store keeps no URL)."""
    return hashlib.sha256("\n".join(where).encode()).digest()[:16]


def _read(text: str | None) -> ContextLimit | None:
    """A learnt context from its stored text; None for none, or for a text kvwise did not write."""
    if text == "":
        return ContextLimit(None)
    return ContextLimit(int(text)) if text is not None and text.isdigit() and int(text) > 0 else None


class Refusals:
    """Per wrapped client: which additions each server (`(host, port)`) refused, and the contexts the
    refusals of kvwise's output limits named, by base URL and model, kept in `store` too (the
    wrapped client's memories' store: another process, or the next run, fits its first call), read
    from it once per base URL and model."""

    __slots__ = ("_contexts", "_refused", "_store")

    def __init__(self, store: Store | None = None) -> None:
        self._refused: set[tuple[str, Hashable]] = set()
        self._contexts: dict[tuple[str, str], ContextLimit | None] = {}  # None: the store has none
        self._store = store

    def mark(self, call: Call, server: Hashable) -> None:
        """Before the call is rewritten into its request: none of what `server` refused is added."""
        if not self._refused:
            return
        for addition in WITHHELD:
            if (addition.name, server) in self._refused:
                addition.withhold(call)

    def context(self, client: Any, model: str) -> ContextLimit | None:
        """The context a refusal named for `model` behind `client`'s base URL (None: none refused there)."""
        if self._store is None and not self._contexts:
            return None
        where = _where(client, model)
        if where not in self._contexts:
            read = self._store.update_value(_CONTEXT_KIND, _key(where), _same) if self._store is not None else None
            self._contexts[where] = _read(read)
        return self._contexts[where]

    def refused(self, error: BaseException, call: Call, request: compat.Request) -> Addition | None:
        """The addition kvwise made by itself that `error` refused, if any."""
        if getattr(error, "status_code", None) not in _REFUSAL_STATUSES:
            return None
        message = str(error)  # the clients' error text holds the answer's body
        for addition in ADDITIONS:
            if addition.added(call, request) and addition.named_by(message):
                return addition
        return None

    def learn(self, addition: Addition, error: BaseException, call: Call, server: Hashable, client: Any) -> None:
        """Remember what `error` refused: the server for an addition it never gets again; for the
        output limit, the context it names (None: none named) for the model behind `client`'s base URL."""
        if addition is OUTPUT_LIMIT:
            where, tokens = _where(client, call.model), OUTPUT_LIMIT.context_named(str(error))
            self._contexts[where] = ContextLimit(tokens)
            if self._store is not None:
                text = "" if tokens is None else str(tokens)
                self._store.update_value(_CONTEXT_KIND, _key(where), lambda _: text)
        else:
            self._refused.add((addition.name, server))


@dataclass(slots=True)
class TakeBack:
    """One call's refusals taken back (`sdk.send.attempts.Resend`): `request` is the next send's, and
    the call's decisions say so (`Decisions.taken_back`), for its span to tell at its end."""

    refusals: Refusals
    call: Call
    request: compat.Request
    server: Hashable
    client: Any  # the live client: its base URL is where a context is learnt

    def refused(self, error: BaseException) -> bool:
        return self.refusals.refused(error, self.call, self.request) is not None

    def take_back(self, error: BaseException) -> None:
        addition = self.refusals.refused(error, self.call, self.request)
        if addition is None:
            return
        addition.take_back(self.call, self.request)
        self.refusals.learn(addition, error, self.call, self.server, self.client)
        self.call.decided.taken_back = True


def _same(text: str | None) -> str | None:
    """A read: the stored text, written back unchanged (so not written at all)."""
    return text
