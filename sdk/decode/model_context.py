"""The context length of each model an OpenAI-compatible server serves, read once per base URL.

A default cap that does not fit the model turns a working call into a 400: vLLM refuses a request
whose prompt plus `max_tokens` exceeds the context, the local backend one whose `max_tokens` alone
does. Both say each model's context in `GET /v1/models` (`max_model_len`, vLLM's field), so a
wrapped client reads that list once per base URL, the first time a cap it filled in goes to an
OpenAI-compatible server (`sdk.decode.limits.fit_to_context`), through the live client's own `get` (its
auth headers, transport and proxies apply) with the client's retries off and a short timeout.

The read never fails a call: a server without the endpoint or the field, an error answer or a
transport fault leave the context unknown, and that is remembered for the base URL as a found
context is, so no call pays for the read again. Hosted OpenAI and Anthropic are never asked (their
contexts dwarf any cap, and their model lists carry no such field).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sdk import compat
from sdk._constants import MODEL_CONTEXT_TIMEOUT_SECONDS

log = logging.getLogger("sdk")

MODELS_PATH = "/models"
CONTEXT_FIELD = "max_model_len"


@dataclass(frozen=True, slots=True)
class Listing:
    """The contexts one server listed, by model id."""

    contexts: Mapping[str, int]

    def context_of(self, model: str) -> int:
        """The model's context; for a name the list lacks (an alias the server also answers to), the
        smallest listed, which is the safe one whichever model serves the name."""
        return self.contexts.get(model, min(self.contexts.values()))


def listing_of(body: Any) -> Listing | None:
    """The contexts in a `/models` answer (`{"data": [{"id", "max_model_len"}, ...]}`); None without any."""
    data = body.get("data") if isinstance(body, Mapping) else None
    contexts = {
        item["id"]: item[CONTEXT_FIELD]
        for item in (data if isinstance(data, list) else ())
        if isinstance(item, Mapping)
        and isinstance(item.get("id"), str)
        and isinstance(item.get(CONTEXT_FIELD), int)
        and not isinstance(item[CONTEXT_FIELD], bool)
        and item[CONTEXT_FIELD] > 0
    }
    return Listing(contexts) if contexts else None


_OPTIONS = {"max_retries": 0, "timeout": MODEL_CONTEXT_TIMEOUT_SECONDS}


class ModelContexts:
    """Per wrapped client: each base URL's `Listing` (None: the server says none), read once.

    >>> contexts = ModelContexts()
    >>> contexts.context(openai_client, "tiny")          # 2048 from the local backend; None from api.openai.com-likes
    >>> await contexts.acontext(async_client, "tiny")    # the async client's twin
    """

    __slots__ = ("_listings", "_lock", "_pending")

    def __init__(self) -> None:
        self._listings: dict[str, Listing | None] = {}
        self._lock = threading.Lock()  # sync reads: one per base URL, the other threads wait for it
        self._pending: dict[str, asyncio.Future[None]] = {}  # async reads in flight

    def context(self, client: Any, model: str) -> int | None:
        """The context of `model` behind the sync `client`'s base URL, reading the list the first time."""
        key = str(compat.base_url(client))
        if key not in self._listings:
            with self._lock:
                if key not in self._listings:
                    try:
                        self._listings[key] = listing_of(client.get(MODELS_PATH, cast_to=object, options=_OPTIONS))
                    except Exception as error:
                        self._listings[key] = _unknown(error)
        return _context(self._listings.get(key), model)

    async def acontext(self, client: Any, model: str) -> int | None:
        """`context` for an async client; concurrent first calls of one event loop share one read."""
        key = str(compat.base_url(client))
        if key not in self._listings:
            loop = asyncio.get_running_loop()
            pending = self._pending.get(key)
            if pending is not None and pending.get_loop() is loop:
                await asyncio.shield(pending)
            else:
                pending = self._pending[key] = loop.create_future()
                try:
                    try:
                        self._listings[key] = listing_of(
                            await client.get(MODELS_PATH, cast_to=object, options=_OPTIONS)
                        )
                    except Exception as error:
                        self._listings[key] = _unknown(error)
                finally:  # a cancelled read remembers nothing: the next call reads again
                    self._pending.pop(key, None)
                    pending.set_result(None)
        return _context(self._listings.get(key), model)


def _unknown(error: Exception) -> Listing | None:
    """What a read that failed leaves: no listing (the failure is never the caller's error)."""
    log.debug("kvwise: no model contexts from GET /models (%s); filled caps go unfitted", type(error).__name__)
    return None


def _context(listing: Listing | None, model: str) -> int | None:
    return listing.context_of(model) if listing is not None else None
