"""HTTP retries are the wrapped client's own: what `Policy.retries` says to them, and no more.

Each kvwise send is one `post` of the wrapped client, and inside it the client's own retry loop runs
as it does bare: its `max_retries`, its backoff and `Retry-After` handling (`_calculate_retry_timeout`),
its rules for what is sent again (`_should_retry`), its `x-stainless-retry-count` header,
`retries_taken`, its middleware and its spans. kvwise re-implements none of it; the one send kvwise
decides is `sdk.send.attempts`'s, after a refusal of something kvwise added.

`Policy.retries` is the `max_retries` of a call whose caller set none (`max_retries_for`), so the
client's own loop makes that many: where the caller set one (the request's options, as
`client.post(..., options={"max_retries": 0})` and frameworks do, or the client's, by its
constructor or `with_options(max_retries=...)`), theirs stands. The clients keep no trace of whether
`max_retries` was given, only its value, so "set none" is told by that value: the client class's
own default (`DEFAULT_MAX_RETRIES`, 2, read from its constructor's signature) counts as none. Under
the default Policy (2) nothing is changed at all: the request goes with the caller's options as written.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from functools import cache
from typing import Any


def max_retries_for(client: Any, options: Mapping[str, Any] | None, retries: int) -> int | None:
    """The `max_retries` option one call through `client` with request `options` gets from
    `Policy.retries` (`retries`): None where the caller set one, or where the client would make
    `retries` anyway (see the module docstring)."""
    if _count((options or {}).get("max_retries")) is not None:
        return None
    own = _count(getattr(client, "max_retries", None))
    if own is None or own == retries or own != _default_max_retries(client.__class__):
        return None
    return retries


def _count(value: Any) -> int | None:
    """`value` if it is a number of retries (the clients' `NotGiven` and anything else is not)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


@cache
def _default_max_retries(client_class: type) -> Any:
    """The `max_retries` a client class gets when its caller passes none (its constructor's default)."""
    try:
        parameter = inspect.signature(client_class).parameters.get("max_retries")
    except (TypeError, ValueError):
        return None
    return parameter.default if parameter is not None else None
