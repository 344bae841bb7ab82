"""Adaptive output caps: per workload, a cap learnt from the workload's own answers.

One `max_output_tokens` for every call is guesswork: a classifier answers in 5 tokens, a summary in
400, and a runaway of either runs to the cap. Each wrapped client keeps, per workload (API,
model and the hash of tools and system prompt, `Decisions.prefix_key`), the output tokens of the workload's
recent answers; once it holds `ADAPTIVE_CAP_MIN_CALLS` of them, a call whose caller set no limit gets
p99 x `Policy.adaptive_cap_margin`, within [`Policy.adaptive_cap_floor`, `Policy.max_output_tokens`].

The estimate is the exact p99 of a sliding window of the last `ADAPTIVE_CAP_WINDOW` answers, not a
P² or t-digest sketch: a P² marker for p99 needs thousands of samples before it settles and follows
a change in the workload slowly; a window of a few hundred ints is exact, forgets old behaviour at a
known rate and costs one sort of the window per learnt call (microseconds).

Answers that reached their limit are not learnt: their length is the cap's, not the workload's (a
runaway, or a cap too small), and learning them would ratchet the cap up by the margin each time.
So that a workload that really grew is not held under its old cap, a workload whose adaptively capped
calls are cut more often than `ADAPTIVE_CAP_MAX_CUT_SHARE` within the window starts over.
Workloads are kept LRU, at most `ADAPTIVE_CAP_WORKLOADS` per wrapped client; everything is locked.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from sdk._constants import (
    ADAPTIVE_CAP_MAX_CUT_SHARE,
    ADAPTIVE_CAP_MIN_CALLS,
    ADAPTIVE_CAP_QUANTILE,
    ADAPTIVE_CAP_WINDOW,
    ADAPTIVE_CAP_WORKLOADS,
)
from sdk.call import Call, Usage
from sdk.lifecycle import CallEnd
from sdk.memory.store import LocalStore, Store

WorkloadKey = tuple[str, str, str]
"""A workload of the adaptive caps: API, model and stable-prefix hash (`workload_of`); the store keeps its
answer windows under these parts (`sdk.memory.records.WindowsKey`)."""


def quantile_of(lengths: list[int]) -> int | None:
    """The p99 of a window of output lengths, or None while it holds too few answers."""
    if len(lengths) < ADAPTIVE_CAP_MIN_CALLS:
        return None
    ordered = sorted(lengths)
    return ordered[min(len(ordered) - 1, math.ceil(ADAPTIVE_CAP_QUANTILE * len(ordered)) - 1)]


def cut_too_often(cuts: int) -> bool:
    """Whether a window with `cuts` adaptively capped answers that reached the cap means the workload changed."""
    return cuts > ADAPTIVE_CAP_MAX_CUT_SHARE * ADAPTIVE_CAP_WINDOW


def reached_cap(usage: Usage, cap: int | None) -> bool:
    """Whether an answer ran to its limit (then its length is the cap's, not the workload's: not learnt)."""
    return cap is not None and usage.output_tokens >= cap


def workload_of(call: Call) -> WorkloadKey | None:
    """The workload of `call`: its API, model and stable-prefix hash (None before the fingerprint)."""
    return (str(call.api), call.model, call.decided.prefix_key) if call.decided.prefix_key else None


class AdaptiveCaps:
    """Per wrapped client: the output lengths of each workload's recent answers (see the module), on
    `store` (by default one in this process, of at most `size` workloads).

    >>> caps = AdaptiveCaps()
    >>> caps.learn(workload, Usage(output_tokens=120), cap=4096, adaptive=False)
    >>> caps.quantile(workload)   # None until the workload has ADAPTIVE_CAP_MIN_CALLS answers
    """

    def __init__(self, store: Store | None = None, *, size: int = ADAPTIVE_CAP_WORKLOADS) -> None:
        self._store = store if store is not None else LocalStore(workloads=size)

    def quantile(self, workload: WorkloadKey) -> int | None:
        """The workload's p99 of output tokens, or None while it has too few answers."""
        return quantile_of(self._store.lengths(workload))

    def cap_for(self, workload: WorkloadKey, margin: float, floor: int, ceiling: int) -> int | None:
        """The adaptive cap of a call of `workload` (None: not learnt yet): p99 x margin within [floor, ceiling]."""
        p99 = self.quantile(workload)
        if p99 is None:
            return None
        return max(floor, min(ceiling, math.ceil(p99 * margin)))

    def learn(self, workload: WorkloadKey, usage: Usage, cap: int | None, adaptive: bool) -> None:
        """An answer of `workload` ended with `usage`, under the limit `cap` (None: none), which was
        the adaptive one when `adaptive`."""
        reached = reached_cap(usage, cap)
        cuts = self._store.push_answer(
            workload, None if reached else usage.output_tokens, reached if adaptive else None
        )
        if adaptive and cut_too_often(cuts):
            self._store.forget(workload)  # the workload changed: learn it again

    def __len__(self) -> int:
        return self._store.held("workload")


@dataclass(frozen=True, slots=True)
class CapLearner:
    """Tells `caps` the usage of each answer of `workload` that ran its course (a `CallListener`);
    `cap` is the limit it was sent with, `adaptive` whether that was the learnt cap."""

    caps: AdaptiveCaps
    workload: WorkloadKey
    cap: int
    adaptive: bool

    def first_chunk(self) -> None:
        pass

    def ended(self, end: CallEnd) -> None:
        if (usage := end.usage_to_learn) is not None:
            self.caps.learn(self.workload, usage, cap=self.cap, adaptive=self.adaptive)
