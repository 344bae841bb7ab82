"""N-gram (prompt-lookup) speculative decoding: its config and the proposer of drafts.

A decoding sequence's last n tokens (n from `prompt_lookup_max` down to `prompt_lookup_min`) are
looked up in its own prompt and output; the tokens that followed their most recent earlier
occurrence are proposed as drafts. The model runner then computes the sequence's last token and
its drafts as one chunk over the paged cache, and the sampler keeps the longest run the model
agrees with (`Sampler.verify`): greedy rows accept a draft equal to their argmax, sampled rows
accept draft d with probability p(d) and on refusal draw from p without d, so the tokens are
distributed as without speculation. Text copied from the prompt (file contents, echoed JSON,
tool arguments) then decodes several tokens per forward pass.
"""

from __future__ import annotations

import json
from array import array
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any, Final

from local_backend.engine.sequence import Sequence

NGRAM: Final = "ngram"
"""The one `method` this engine speculates with (vLLM's name)."""

TOKEN_BYTES: Final = array("i").itemsize


@dataclass(frozen=True, slots=True)
class SpeculativeConfig:
    """vLLM's `--speculative-config` for n-gram drafting.

        SpeculativeConfig.parse('{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 3}')

    `num_speculative_tokens` drafts at most per step; `prompt_lookup_max` / `prompt_lookup_min`
    bound the n-gram looked up (either alone sets both, vLLM's rule).
    """

    num_speculative_tokens: int
    prompt_lookup_max: int
    prompt_lookup_min: int
    method: str = NGRAM

    def __post_init__(self) -> None:
        checks = [
            ("method", self.method == NGRAM, f"is not supported: this engine speculates with '{NGRAM}' only"),
            ("num_speculative_tokens", self.num_speculative_tokens >= 1, "must be >= 1"),
            ("prompt_lookup_min", self.prompt_lookup_min >= 1, "must be >= 1"),
            (
                "prompt_lookup_max",
                self.prompt_lookup_max >= self.prompt_lookup_min,
                f"must be >= prompt_lookup_min ({self.prompt_lookup_min})",
            ),
        ]
        for name, ok, rule in checks:
            if not ok:
                raise ValueError(f"{name}={getattr(self, name)!r} {rule}")

    @classmethod
    def parse(cls, value: str | Mapping[str, Any]) -> SpeculativeConfig:
        """The config a JSON object (or its text) gives; `ValueError` says what is wrong with it."""
        raw = json.loads(value) if isinstance(value, str) else value
        if not isinstance(raw, Mapping):
            raise ValueError(f"must be a JSON object, got {type(raw).__name__}")
        unknown = set(raw) - {"method", "num_speculative_tokens", "prompt_lookup_max", "prompt_lookup_min"}
        if unknown:
            raise ValueError(f"has keys this engine does not take: {', '.join(sorted(unknown))}")
        if raw.get("method") != NGRAM:
            raise ValueError(
                f"method={raw.get('method')!r} is not supported: this engine speculates with '{NGRAM}' only"
            )
        if not isinstance(raw.get("num_speculative_tokens"), int):
            raise ValueError("num_speculative_tokens must be given as an integer")
        lookup_max, lookup_min = raw.get("prompt_lookup_max"), raw.get("prompt_lookup_min")
        if lookup_max is None and lookup_min is None:
            raise ValueError("prompt_lookup_max (or prompt_lookup_min) must be given for 'ngram'")
        lookup_max = lookup_min if lookup_max is None else lookup_max
        lookup_min = lookup_max if lookup_min is None else lookup_min
        if not isinstance(lookup_max, int) or not isinstance(lookup_min, int):
            raise ValueError("prompt_lookup_max and prompt_lookup_min must be integers")
        return cls(raw["num_speculative_tokens"], lookup_max, lookup_min)

    def to_json(self) -> str:
        """The `--speculative-config` value giving this config (vLLM's keys)."""
        return json.dumps(asdict(self), sort_keys=True)


class NgramProposer:
    """Drafts for a decoding sequence from its own tokens; never past `max_tokens` or `max_model_len`.

    The lookup is a byte search (`bytes.rfind`) over the tokens packed as int32, C speed over the
    whole context; a hit at an offset that is not a token boundary is skipped.
    """

    def __init__(self, config: SpeculativeConfig, max_model_len: int):
        self.config = config
        self.max_model_len = max_model_len

    def propose(self, seq: Sequence, budget: int) -> tuple[int, ...]:
        """Up to `budget` drafts following the sequence's last tokens (none for a request whose
        `logits_processor` must see each token once, in order)."""
        params = seq.params
        if params.logits_processor is not None:
            return ()
        room = min(
            self.config.num_speculative_tokens,
            budget,
            params.max_tokens - seq.num_output_tokens - 1,
            self.max_model_len - len(seq) - 1,
        )
        if room <= 0:
            return ()
        return continuation(seq.token_ids, self.config.prompt_lookup_min, self.config.prompt_lookup_max, room)


def continuation(tokens: list[int], lookup_min: int, lookup_max: int, count: int) -> tuple[int, ...]:
    """The `count` tokens after the most recent earlier occurrence of the last n tokens, for the
    longest n in [lookup_min, lookup_max] that occurs; () when none does.

    The copy may overlap what it produces, as LZ77's does: a run repeating with period p (the
    most recent occurrence is p tokens back, so only p tokens follow it) goes on repeating.
    """
    size = len(tokens)
    packed = array("i", tokens).tobytes()
    for n in range(min(lookup_max, size - 1), lookup_min - 1, -1):
        suffix = packed[(size - n) * TOKEN_BYTES :]
        end = (size - 1) * TOKEN_BYTES  # an occurrence ending before the last token: something follows it
        while (at := packed.rfind(suffix, 0, end)) >= 0:
            if at % TOKEN_BYTES == 0:
                start = at // TOKEN_BYTES + n
                drafts = tokens[start : start + count]
                while len(drafts) < count:
                    drafts.append(drafts[len(drafts) - (size - start)])
                return tuple(drafts)
            end = at + len(suffix) - 1
    return ()
