"""When a store outside the process fails: an outage, not an error (`sdk.memory.redis_link`, `sdk.memory.sqlite_link`).

A failure starts an outage, logged once: the store's operations answer from the process meanwhile,
each call's span says `kvwise.state.degraded` and why (`kvwise.state.degraded_reason`), and the store
is tried again `retry_seconds` later; the first answer after it ends the outage (logged too). A
malformed value read (`sdk.memory.values`) is logged and told to the call that read it the same way.
"""

from __future__ import annotations

import logging
import threading
from time import monotonic

from sdk.memory.values import _Malformed

logger = logging.getLogger(__name__)


class Outage:
    """Whether the store at `where` (no credentials) is failing, why, and when to try it again."""

    def __init__(self, where: str, retry_seconds: float) -> None:
        self.where = where
        self._retry_seconds = retry_seconds
        self._reason: str | None = None
        self._retry_at = 0.0
        self._lock = threading.Lock()
        self._found = threading.local()  # `reason`: a malformed value this thread's call read (`reason_for_call`)

    def waiting(self) -> bool:
        """Whether the store is left alone now (it failed less than `retry_seconds` ago)."""
        return self._reason is not None and monotonic() < self._retry_at

    def failed(self, reason: str) -> None:
        """The store failed for `reason`: an outage starts (logged once), or goes on."""
        reason = reason[:200]
        with self._lock:
            if self._reason is None:
                logger.warning("kvwise state: %s failed (%s); calls go on with in-process state", self.where, reason)
            self._reason = reason
            self._retry_at = monotonic() + self._retry_seconds

    def answered(self) -> None:
        """The store answered: an outage, if any, is over."""
        if self._reason is not None:
            with self._lock:
                if self._reason is not None:
                    logger.warning("kvwise state: %s answers again; memories are kept there again", self.where)
                    self._reason = None

    def reason(self) -> str | None:
        """Why the store is failing now (None: it is not)."""
        return self._reason

    def malformed(self, error: _Malformed, *, during_call: bool = True) -> None:
        """A value read was malformed (the caller drops it): logged, and told to this thread's call
        by `reason_for_call` where it was read `during_call` (not at a call's end)."""
        logger.warning("kvwise state: %s held a %s; it is dropped", self.where, error)
        if during_call:
            self._found.reason = error.reason

    def reason_for_call(self) -> str | None:
        """Why this thread's call could not use the store: an outage, or a malformed value it read."""
        found, self._found.reason = getattr(self._found, "reason", None), None
        return self._reason or found
