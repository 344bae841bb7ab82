"""The simulated decode: which tokens a reply streams and why it ends.

The reply is the simulator's scripted text (or a unit repeated without end in loop mode), tokenised
with `tokens.tokenize`. It ends at the earliest of:
- a stop sequence: the text stops just before it (`Finish.STOP`, the sequence reported), provided
  the tokens needed to complete the stop text fit within the cap;
- the token cap (`Finish.LENGTH`);
- the end of the scripted text (`Finish.END`).
Each API maps `Finish` onto its own words (`stop`/`length`, `end_turn`/`max_tokens`/`stop_sequence`,
`completed`/`incomplete`).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from itertools import accumulate

from .tokens import tokenize


class Finish(enum.Enum):
    END = "end"
    LENGTH = "length"
    STOP = "stop"


@dataclass(frozen=True, slots=True)
class DecodeParams:
    """What the request asked of decode; `max_tokens` None means the default cap `decode` is given
    (0, which Anthropic takes to pre-warm the cache, decodes nothing)."""

    max_tokens: int | None
    stop: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.max_tokens is not None and self.max_tokens < 0:
            raise ValueError(f"max_tokens must be at least 0, got {self.max_tokens!r}")


@dataclass(frozen=True, slots=True)
class Decoded:
    """The tokens to send, in order, and how the reply ended."""

    tokens: tuple[str, ...]
    finish: Finish
    stop_sequence: str | None = None

    @property
    def text(self) -> str:
        return "".join(self.tokens)


def script_tokens(reply: str, loop_unit: str | None, cap: int) -> list[str]:
    """The tokens the model would say: the reply, or enough repeats of the loop unit to pass `cap`."""
    if loop_unit is None:
        return tokenize(reply)
    per_repeat = len(tokenize(loop_unit * 2)) - len(tokenize(loop_unit))  # joined repeats may merge tokens
    return tokenize(loop_unit * (cap // max(per_repeat, 1) + 2))


def decode(reply: str, loop_unit: str | None, params: DecodeParams, default_cap: int) -> Decoded:
    """Apply stop sequences and the cap to the scripted tokens (see the module docstring)."""
    cap = params.max_tokens if params.max_tokens is not None else default_cap
    tokens = script_tokens(reply, loop_unit, cap)
    text = "".join(tokens)
    found = [(text.find(stop), stop) for stop in params.stop if stop and stop in text]
    if found:
        start, stop = min(found)
        offsets = list(accumulate(len(token) for token in tokens))
        needed = next(i + 1 for i, end in enumerate(offsets) if end >= start + len(stop))
        if needed <= cap:
            return Decoded(_tokens_of_prefix(tokens, start), Finish.STOP, stop)
    if len(tokens) > cap:
        return Decoded(tuple(tokens[:cap]), Finish.LENGTH)
    return Decoded(tuple(tokens), Finish.END)


def _tokens_of_prefix(tokens: list[str], length: int) -> tuple[str, ...]:
    """The tokens that spell the first `length` characters, the last one cut where it must be."""
    out: list[str] = []
    used = 0
    for token in tokens:
        if used >= length:
            break
        out.append(token[: length - used])
        used += len(out[-1])
    return tuple(out)
