"""A request's token state as the scheduler and block manager see it."""

from __future__ import annotations

import enum
import time

from local_backend.sampling.sampling_params import SamplingParams


class Status(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


class Sequence:
    """Prompt and output tokens, how many have KV in the cache, and the blocks that hold them.

    Tokens `[0, num_computed_tokens)` have KV in the cache; the rest (the prompt at first, then the
    last sampled token) are computed by the next steps. A step that computes the last token samples
    the next one. Preemption drops the KV (`num_computed_tokens = 0`) and keeps the tokens.

    `cache_salt` (e.g. a tenant) is mixed into the first block's name, so only sequences with the
    same salt share prefix-cache blocks. `num_cache_written_tokens` counts prompt tokens in blocks this
    sequence added to the prefix cache; `num_offered_blocks` is how many of its leading full blocks
    were already offered to the cache (each is counted once, even when recomputed after preemption).
    `num_draft_tokens` / `num_accepted_tokens` count the speculative drafts proposed for it and
    those the model agreed with.
    """

    __slots__ = (
        "request_id",
        "params",
        "cache_salt",
        "token_ids",
        "num_prompt_tokens",
        "num_computed_tokens",
        "num_cached_tokens",
        "num_cache_written_tokens",
        "num_offered_blocks",
        "block_table",
        "block_hashes",
        "status",
        "num_preemptions",
        "num_draft_tokens",
        "num_accepted_tokens",
        "arrival_time",
        "scheduled_time",
        "first_token_time",
        "finished_time",
        "__weakref__",
    )

    def __init__(
        self,
        request_id: str,
        prompt_token_ids: list[int],
        params: SamplingParams,
        cache_salt: str | None = None,
    ):
        self.request_id = request_id
        self.params = params
        self.cache_salt = cache_salt
        self.token_ids = list(prompt_token_ids)
        self.num_prompt_tokens = len(prompt_token_ids)
        self.num_computed_tokens = 0
        self.num_cached_tokens = 0
        self.num_cache_written_tokens = 0
        self.num_offered_blocks = 0
        self.block_table: list[int] = []
        self.block_hashes: list[int] = []
        self.status = Status.WAITING
        self.num_preemptions = 0
        self.num_draft_tokens = 0
        self.num_accepted_tokens = 0
        self.arrival_time = time.perf_counter()
        self.scheduled_time: float | None = None
        self.first_token_time: float | None = None
        self.finished_time: float | None = None

    def append_token(self, token: int) -> None:
        """Add a sampled token (the first one stamps `first_token_time`)."""
        self.token_ids.append(token)
        if self.first_token_time is None:
            self.first_token_time = time.perf_counter()

    def accept_drafts(self, drafts: tuple[int, ...], accepted: int) -> None:
        """Add the first `accepted` of a step's `drafts`: verified tokens whose KV the step computed."""
        self.token_ids.extend(drafts[:accepted])
        self.num_draft_tokens += len(drafts)
        self.num_accepted_tokens += accepted

    def truncate(self, length: int) -> None:
        """Drop the tokens after the first `length`: a stop inside a step's accepted run ends the
        output there (the sequence is finishing; its blocks are released next)."""
        del self.token_ids[length:]
        self.num_computed_tokens = min(self.num_computed_tokens, length)

    def __len__(self) -> int:
        return len(self.token_ids)

    @property
    def num_uncomputed_tokens(self) -> int:
        return len(self.token_ids) - self.num_computed_tokens

    @property
    def num_output_tokens(self) -> int:
        return len(self.token_ids) - self.num_prompt_tokens

    @property
    def prompt_token_ids(self) -> list[int]:
        return self.token_ids[: self.num_prompt_tokens]

    @property
    def output_token_ids(self) -> list[int]:
        return self.token_ids[self.num_prompt_tokens :]

    @property
    def is_finished(self) -> bool:
        return self.status is Status.FINISHED

    def num_blocks_needed(self, block_size: int) -> int:
        """Blocks to hold every token: ⌈len / block_size⌉."""
        return -(-len(self.token_ids) // block_size)
