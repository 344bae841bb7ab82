"""Next tokens from logits: penalties, DRY, temperature, top-k/top-p/min-p, greedy or seeded draws.

The order is vLLM's: penalties on the raw logits, then (llama.cpp) DRY, then temperature, then the
filters, then a draw. Greedy rows (`temperature` below `SAMPLING_EPS`) take the argmax after penalties and DRY.

Built to scale with batch and vocabulary (a few passes over `[rows, vocab]` per step, no sort of
a whole row, no per-step tensor rebuilt from a request's token list):
- penalties touch only each row's seen tokens, kept incrementally per request (`penalties`);
- weights w = 2^((logit − max) · log2(e) / T), so w ∈ (0, 1] and the top token has w = 1;
- top-p and min-p alone filter by rejection: a row's draw is kept if the filters keep that token,
  else drawn again; top-k (and what comes with it) masks w below a threshold found by sorting the
  few candidates above a cutoff (`keep_thresholds`);
- the draw is inverse-CDF with one uniform per row (chunk sums, then the chosen chunk): an exact
  sample of w / Σw. A seeded request draws its uniform from its own generator, so its tokens do not
  depend on what else is in the batch.
The weights with their chunk sums, the top-p test's mass, the draw and the penalties are the
sampler's ops (`ops`: natively on CPU, `csrc/sampling.cpp`, fewer passes over the logits than the
torch forms take; the same steps, the same tokens).

`verify` checks speculative drafts (`speculative`) against their rows by the same steps, keeping
what plain sampling would have drawn, in distribution.
"""

from __future__ import annotations

import math
import weakref
from array import array
from collections.abc import Callable, Hashable
from collections.abc import Sequence as Seq
from functools import partial
from typing import Protocol

import torch

from local_backend._constants import SAMPLER_FIRST_CUTOFF, SAMPLER_REJECTION_ROUNDS
from local_backend.kernels.ops import TorchOps, chunk_sums
from local_backend.sampling.penalties import PenaltyState, dry_penalties
from local_backend.sampling.sampling_params import SamplingParams

LOG2E = 1.0 / math.log(2.0)


class Sequence(Hashable, Protocol):
    """What the sampler reads of a sequence (the engine's `Sequence` is one): sampling sits below the engine,
    so it names the fields it needs rather than importing the engine's type. Sequences key the sampler's
    per-sequence state (penalty buffers, seeded generators) weakly, by identity."""

    @property
    def params(self) -> SamplingParams: ...

    @property
    def token_ids(self) -> list[int]: ...

    @property
    def prompt_token_ids(self) -> list[int]: ...

    @property
    def output_token_ids(self) -> list[int]: ...


def keep_thresholds(w: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor, min_p: torch.Tensor) -> torch.Tensor:
    """Per row, the weight below which the filters drop a token (w: `[rows, vocab]`, max 1 per row).

    top-k keeps the k largest (ties with the k-th kept); top-p, over what top-k kept, keeps the
    fewest most likely tokens whose probabilities sum to at least p; min-p keeps w ≥ min_p (the
    top token has w = 1). The first two need only the tokens above a cutoff, sorted: first
    `SAMPLER_FIRST_CUTOFF` (enough for most rows); a top-p row it leaves short then takes
    c = (1 − p) · Σw / vocab, which cannot fail (the tokens below c weigh less than (1 − p) · Σw);
    a top-k row short of k tokens takes its whole row.
    """
    rows, vocab = w.shape
    threshold = min_p.to(w.dtype).clone()
    k = top_k.clamp(max=vocab)
    pending = torch.nonzero((k < vocab) | (top_p < 1)).flatten()
    if not len(pending):
        return threshold
    total = w.sum(dim=-1).double()
    cutoff = torch.full((len(pending),), SAMPLER_FIRST_CUTOFF, dtype=torch.float64, device=w.device)
    while len(pending):
        sub = w if len(pending) == rows else w[pending]  # after the first pass, the few rows left
        flat = torch.nonzero((sub >= cutoff.to(w.dtype)[:, None]).view(-1)).flatten()
        row, vals = flat // vocab, sub.view(-1)[flat].double()
        order = torch.sort(row.double() * 2 + (1 - vals)).indices  # by row, then weight descending
        row, vals = row[order], vals[order]
        n = len(pending)
        count = torch.bincount(row, minlength=n)
        start = count.cumsum(0) - count
        kk, p = k[pending], top_p[pending].double()
        in_k = (torch.arange(len(row), device=w.device) - start[row]) < kk[row]  # a prefix of each row
        v = vals * in_k
        mass_k = torch.zeros(n, dtype=torch.float64, device=w.device).index_add_(0, row, v)
        before = v.cumsum(0) - v - (mass_k.cumsum(0) - mass_k)[row]  # mass above, within its row
        limited = kk < vocab
        k_found = limited & (count >= kk)  # the top-k set lies among the candidates
        norm = torch.where(k_found, mass_k, total[pending])
        ok = k_found | (~limited & ((p >= 1) | (mass_k >= p * norm))) | (cutoff == 0)
        keep = in_k & ((p[row] >= 1) | (before < p[row] * norm[row]))  # again a prefix of each row
        kept = torch.bincount(row[keep], minlength=n)
        smallest = vals[start + kept - 1].to(w.dtype)
        done = pending[ok]
        threshold[done] = torch.maximum(threshold[done], smallest[ok])
        safe = torch.where(limited, 0.0, (1 - p) * norm / vocab)
        cutoff = torch.where(cutoff < SAMPLER_FIRST_CUTOFF, 0.0, torch.minimum(safe, cutoff / 2))[~ok]
        pending = pending[~ok]
    return threshold


def filters(params: SamplingParams, vocab: int) -> bool:
    """Whether top-k, top-p or min-p cut the request's distribution."""
    return (params.top_k or vocab) < vocab or params.top_p < 1 or params.min_p > 0


def processed(logits: torch.Tensor, seqs: Seq[Sequence]) -> torch.Tensor:
    """Each request's own `logits_processor` on its raw row (a copy; none set: the logits as they are)."""
    processors = [(i, p) for i, s in enumerate(seqs) if (p := s.params.logits_processor) is not None]
    if not processors:
        return logits
    out = logits.clone()
    for i, processor in processors:
        out[i] = processor(seqs[i].output_token_ids, out[i])
    return out


class Sampler:
    """Turns one step's logits (one row per sampling sequence) into token ids.

    `breakers(strings)` maps DRY breaker strings to token ids (the engine resolves and caches them).
    What a request keeps between its steps (its penalties' seen tokens, a seeded request's
    generator) is the sampler's, held per sequence for as long as the sequence lives.
    `ops` are the ones chosen for the float32 logits on the model's device (`ops.select`).
    """

    def __init__(self, vocab_size: int, breakers: Callable[[tuple[str, ...]], frozenset[int]], ops: TorchOps):
        self.vocab_size = vocab_size
        self.breakers = breakers
        self.ops = ops
        self._buffers: dict[str, torch.Tensor] = {}
        self._penalty_states: weakref.WeakKeyDictionary[Sequence, PenaltyState] = weakref.WeakKeyDictionary()
        self._generators: weakref.WeakKeyDictionary[Sequence, torch.Generator] = weakref.WeakKeyDictionary()

    def _buffer(self, name: str, like: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """A `[rows, vocab]` work buffer kept across steps: a fresh one each step would cost more in
        page faults than the arithmetic (it is rows × vocab × 4 bytes)."""
        rows = like.shape[0]
        buffer = self._buffers.get(name)
        if buffer is None or buffer.shape[0] < rows or buffer.device != like.device or buffer.dtype != dtype:
            buffer = self._buffers[name] = torch.empty(rows, like.shape[1], dtype=dtype, device=like.device)
        return buffer[:rows]

    def __call__(self, logits: torch.Tensor, seqs: Seq[Sequence]) -> list[int]:
        """Token ids for `logits` (`[rows, vocab]`), one row per sequence; the logits are used up
        (overwritten in place: in-place passes cost a fraction of ones into another buffer)."""
        params = [s.params for s in seqs]
        logits = self.adjusted_logits(processed(logits, seqs), seqs)
        if all(p.greedy for p in params):
            return self.ops.argmax(logits).tolist()
        greedy = [i for i, p in enumerate(params) if p.greedy]
        argmax = self.ops.argmax(logits[greedy]) if greedy else None
        tokens = self._draw(*self.weights(logits, params), seqs)
        if argmax is not None:
            tokens[greedy] = argmax
        return tokens.tolist()

    def adjusted_logits(
        self, logits: torch.Tensor, seqs: Seq[Sequence], ahead: Seq[tuple[int, ...]] | None = None
    ) -> torch.Tensor:
        """The logits after vLLM's penalties and llama.cpp's DRY, applied in place (float32).

        `ahead[i]` (verification rows) are tokens row i sees after its sequence's own: the drafts before it.
        """
        out = logits.float().contiguous()
        after = ahead or [()] * len(seqs)
        penalised = [i for i, s in enumerate(seqs) if s.params.has_penalties]
        if penalised:
            self._penalise(out, [seqs[i] for i in penalised], penalised, [after[i] for i in penalised])
        dry = [i for i, s in enumerate(seqs) if s.params.dry_multiplier > 0]
        if dry:
            self._dry(out, seqs, dry, after)
        return out

    def verify(self, logits: torch.Tensor, seqs: Seq[Sequence], drafts: Seq[tuple[int, ...]]) -> list[list[int]]:
        """Each speculating sequence's accepted drafts and the token after them, from its
        `len(draft) + 1` rows of `logits` (row j: its next-token logits after `draft[:j]`).

        Greedy: a draft is kept while it equals its row's argmax; the first that differs is replaced
        by that argmax (all kept: the last row's argmax follows). Sampled, the rejection rule for a
        draft that is certain: draft d of row j is kept with probability p_j(d), p_j the row's
        distribution after temperature and filters; the first refused is replaced by a draw from
        p_j without d, renormalised; all kept: a draw from the last row. Each token is then
        distributed as plain sampling draws it. (No `logits_processor` here: the proposer skips
        requests that have one.)
        """
        rows = [seq for seq, draft in zip(seqs, drafts) for _ in range(len(draft) + 1)]
        ahead = [draft[:j] for draft in drafts for j in range(len(draft) + 1)]
        logits = self.adjusted_logits(logits, rows, ahead)
        device, params = logits.device, [s.params for s in rows]
        proposed = torch.tensor([t for draft in drafts for t in (*draft, 0)], device=device)  # 0: a last row
        argmax = self.ops.argmax(logits)
        keep = argmax == proposed
        sampled = [i for i, p in enumerate(params) if not p.greedy]
        if sampled:
            w, _ = self.weights(logits, params)
            filtered = [i for i in sampled if filters(params[i], self.vocab_size)]
            if filtered:
                self._mask([rows[i] for i in filtered], w, filtered)
            index = torch.tensor(sampled, device=device)
            chance = w[index].gather(1, proposed[index][:, None])[:, 0] / w[index].sum(dim=-1)
            keep[index] = self._uniforms([rows[i] for i in sampled], device) < chance
        kept, argmaxes = keep.tolist(), argmax.tolist()
        out: list[list[int]] = []
        redraw: list[tuple[int, int]] = []  # (sequence, row) whose last token is drawn
        row = 0
        for seq, draft in zip(seqs, drafts):
            accepted = next((j for j in range(len(draft)) if not kept[row + j]), len(draft))
            last = row + accepted
            out.append([*draft[:accepted], argmaxes[last]])
            if not seq.params.greedy:
                if accepted < len(draft):
                    w[last, draft[accepted]] = 0
                redraw.append((len(out) - 1, last))
            row += len(draft) + 1
        if redraw:
            index = torch.tensor([r for _, r in redraw], device=device)
            sub = w.index_select(0, index)
            tokens = self.ops.draw(sub, chunk_sums(sub), self._uniforms([rows[r] for _, r in redraw], device))
            for (i, _), token in zip(redraw, tokens.tolist()):
                out[i][-1] = token
        return out

    def weights(self, logits: torch.Tensor, params: Seq[SamplingParams]) -> tuple[torch.Tensor, torch.Tensor]:
        """Unnormalised probabilities after temperature, in place: w = 2^((logit − max) · log2(e) / T),
        and their `chunk_sums`. Greedy rows use T = 1."""
        temperature = torch.tensor([1.0 if p.greedy else p.temperature for p in params], device=logits.device)
        return self.ops.tempered_weights(logits, LOG2E / temperature)

    def _draw(self, w: torch.Tensor, sums: torch.Tensor, seqs: Seq[Sequence]) -> torch.Tensor:
        """One token per row from w under its filters.

        Rows with top-k are masked below `keep_thresholds` first. Rows with only top-p or min-p draw
        from the whole row and keep the token if the filters keep it (mass of heavier tokens < p ·
        Σw, and w ≥ min_p), else draw again: an exact sample of the filtered distribution that
        costs a pass or two instead of a search for the cut (a kept token has probability ≥ p, so
        a redraw is rare); rows still refused after `SAMPLER_REJECTION_ROUNDS` are masked.
        """
        vocab = self.vocab_size
        params = [s.params for s in seqs]
        sampled = [i for i, p in enumerate(params) if not p.greedy]
        with_k = [i for i in sampled if (params[i].top_k or vocab) < vocab]
        if with_k:
            self._mask([seqs[i] for i in with_k], w, with_k)
            sums = chunk_sums(w)
        totals = sums.sum(-1)  # Σw per row, for the filters' test below (w is not changed until the end)
        tokens = self.ops.draw(w, sums, self._uniforms(seqs, w.device))
        rest = [i for i in sampled if i not in with_k and (params[i].top_p < 1 or params[i].min_p > 0)]
        for _ in range(SAMPLER_REJECTION_ROUNDS):
            if not rest:
                break
            index = torch.tensor(rest, device=w.device)
            sub = w if len(rest) == len(seqs) else w.index_select(0, index)
            chosen = sub.gather(1, tokens[index][:, None])
            top_p = torch.tensor([params[i].top_p for i in rest], device=w.device)
            min_p = torch.tensor([params[i].min_p for i in rest], device=w.device)
            heavier = self.ops.heavier_mass(sub, chosen, partial(self._buffer, "scratch", sub))
            kept = (top_p >= 1) | (heavier < top_p * totals[index])
            if any(params[i].min_p > 0 for i in rest):
                kept &= chosen[:, 0] >= torch.minimum(min_p, sub.amax(-1))
            refused = [i for i, ok in zip(rest, kept.tolist()) if not ok]
            if refused:
                again = torch.tensor(refused, device=w.device)
                uniforms = self._uniforms([seqs[i] for i in refused], w.device)
                tokens[again] = self.ops.draw(w.index_select(0, again), sums[again], uniforms)
            rest = refused
        if rest:
            self._mask([seqs[i] for i in rest], w, rest)
            again = torch.tensor(rest, device=w.device)
            masked = w[again]
            tokens[again] = self.ops.draw(masked, chunk_sums(masked), self._uniforms([seqs[i] for i in rest], w.device))
        return tokens

    def _mask(self, seqs: list[Sequence], w: torch.Tensor, rows: list[int]) -> None:
        """Zero, in these rows of w, what top-k/top-p/min-p drop."""
        vocab = self.vocab_size
        every = len(rows) == w.shape[0]
        sub = w if every else w[torch.tensor(rows, device=w.device)]
        threshold = keep_thresholds(
            sub,
            torch.tensor([min(s.params.top_k or vocab, vocab) for s in seqs], device=w.device),
            torch.tensor([s.params.top_p for s in seqs], device=w.device),
            torch.tensor([s.params.min_p for s in seqs], device=w.device),
        )
        threshold = torch.minimum(threshold, sub.amax(dim=-1))  # min_p=1 keeps the top token
        sub.mul_(torch.ge(sub, threshold[:, None], out=self._buffer("mask", sub, torch.bool)))
        if not every:
            w[torch.tensor(rows, device=w.device)] = sub

    def _uniforms(self, seqs: Seq[Sequence], device: torch.device) -> torch.Tensor:
        uniforms = torch.rand(len(seqs), dtype=torch.float64, device=device)
        for i, seq in enumerate(seqs):
            if seq.params.seed is not None:
                generator = self._generators.get(seq)
                if generator is None:
                    generator = self._generators[seq] = torch.Generator(device=device)
                    generator.manual_seed(seq.params.seed)
                uniforms[i] = torch.rand(1, generator=generator, dtype=torch.float64, device=device)
        return uniforms

    def _penalise(
        self, logits: torch.Tensor, seqs: list[Sequence], rows: list[int], ahead: list[tuple[int, ...]]
    ) -> None:
        """Penalties on each row's seen tokens only, gathered and scattered back in place.

        The per-entry buffers (flat index base, repetition penalty) are written on the host by
        `array` repetition, a C loop, and copied once each: a device-side fill per buffer
        (`repeat_interleave`) costs more than the gather itself at large batches.
        """
        device, vocab = logits.device, logits.shape[-1]
        states = []
        for seq, drafts in zip(seqs, ahead):
            state = self._penalty_states.get(seq)
            if state is None:
                state = self._penalty_states[seq] = PenaltyState(seq.prompt_token_ids, seq.params)
            state.update(seq.token_ids)
            states.append(state.ahead(drafts) if drafts else state)

        def joined(buffers: Seq[array[int] | array[float]], dtype: torch.dtype) -> torch.Tensor:
            return torch.frombuffer(bytearray().join(buffers), dtype=dtype).to(device)

        starts = [array("q", [row * vocab]) * len(state.ids) for row, state in zip(rows, states, strict=True)]
        repetitions = [
            array("f", [seq.params.repetition_penalty]) * len(state.ids)
            for seq, state in zip(seqs, states, strict=True)
        ]
        index = joined([s.ids for s in states], torch.long).add_(joined(starts, torch.long))
        offsets, repetition = joined([s.offsets for s in states], torch.float32), joined(repetitions, torch.float32)
        self.ops.apply_penalties(logits, index, offsets, repetition)  # each index once: a row's seen ids are distinct

    def _dry(self, logits: torch.Tensor, seqs: Seq[Sequence], rows: list[int], ahead: Seq[tuple[int, ...]]) -> None:
        at: list[int] = []
        tokens: list[int] = []
        amounts: list[float] = []
        for i in rows:
            params = seqs[i].params
            context = [*seqs[i].token_ids, *ahead[i]] if ahead[i] else seqs[i].token_ids
            penalties = dry_penalties(context, params, self.breakers(params.dry_sequence_breakers))
            at.extend([i] * len(penalties))
            tokens.extend(penalties)
            amounts.extend(penalties.values())
        if at:
            device = logits.device
            index = (torch.tensor(at, device=device), torch.tensor(tokens, device=device))
            logits.index_put_(index, -torch.tensor(amounts, device=device), accumulate=True)
