"""A GGUF file's `tokenizer.ggml.*` metadata → a `tokenizers.Tokenizer`, as transformers' GGUF converter builds it.

A GGUF carries no `tokenizer.json`: llama.cpp stores the vocabulary, the merges (or, for
SentencePiece, the scores they are derived from), each token's type and the special ids as
metadata. `tokenizer.ggml.model` says which algorithm (`gpt2`: byte-level BPE; `llama`:
SentencePiece BPE with byte fallback) and `tokenizer.ggml.pre` how text is split before merging,
which is the one thing a GGUF names rather than stores: the splits here are llama.cpp's own for
each name it writes. An unknown model or pre-tokenizer is refused, naming it, rather than guessed.

The vocabulary is input like the rest of the file: `check_vocabulary` refuses, naming the key and
the entry, what would make building or running the tokenizer fail or cost without bound (a token
past `MAX_TOKEN_BYTES`, a control token that is empty or spelled twice, a merge of tokens the
vocabulary lacks, which the tokenizers library answers with a panic, a special id past the end).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers

from local_backend import _constants as C

CONTROL_TOKEN_TYPE = 3
"""llama.cpp's `LLAMA_TOKEN_TYPE_CONTROL`: `<|im_end|>` and kin, matched whole and skipped on decode."""

USER_DEFINED_TOKEN_TYPE = 4
"""llama.cpp's `LLAMA_TOKEN_TYPE_USER_DEFINED`: added tokens such as `<think>`, matched whole, decoded as text."""

TOKEN_TYPES = range(7)
"""llama.cpp's token types: undefined, normal, unknown, control, user-defined, unused, byte."""

SPECIAL_ID_KEYS = tuple(
    f"tokenizer.ggml.{name}_token_id"
    for name in ("bos", "eos", "eot", "eom", "unknown", "seperator", "padding", "mask")
)
"""The keys that name a token by its id (llama.cpp spells `seperator` so)."""

SPIECE_UNDERLINE = "\u2581"
"""SentencePiece's visible space."""

_LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)

_QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)


@dataclass(frozen=True, slots=True)
class _Split:
    """How a byte-level vocabulary splits text: digits one by one first (SmolLM's), then a regex
    (None: ByteLevel's own, GPT-2's)."""

    regex: str | None
    single_digits: bool = False


BYTE_LEVEL_SPLITS: Mapping[str, _Split] = {
    "default": _Split(None),
    "gpt2": _Split(None),
    "smollm": _Split(None, single_digits=True),
    "llama3": _Split(_LLAMA3_SPLIT),
    "llama-v3": _Split(_LLAMA3_SPLIT),
    "llama-bpe": _Split(_LLAMA3_SPLIT),
    "smaug-bpe": _Split(_LLAMA3_SPLIT),
    "qwen2": _Split(_QWEN2_SPLIT),
}
"""`tokenizer.ggml.pre` → llama.cpp's split for it (llama-vocab.cpp's `regex_exprs`)."""


def check_vocabulary(metadata: Mapping[str, Any], rows: int | None) -> None:
    """Refuse, with a `ValueError` naming the key and entry, a `tokenizer.ggml.*` vocabulary that `build_tokenizer`
    cannot build within bounds, or one of another size than the embedding's `rows`."""
    kind = metadata.get("tokenizer.ggml.model")
    if not isinstance(kind, str) or kind not in _BUILDERS:
        raise ValueError(f"tokenizer.ggml.model={kind!r} is not supported; supported: {sorted(_BUILDERS)}")
    tokens = _strings(metadata, "tokenizer.ggml.tokens")
    if tokens is None or not tokens:
        raise ValueError("tokenizer.ggml.tokens is missing or empty")
    if rows is not None and len(tokens) != rows:
        raise ValueError(f"tokenizer.ggml.tokens holds {len(tokens):,} tokens, but token_embd.weight has {rows:,} rows")
    for index, token in enumerate(tokens):
        if len(token) * 4 > C.MAX_TOKEN_BYTES and len(token.encode()) > C.MAX_TOKEN_BYTES:
            raise ValueError(
                f"tokenizer.ggml.tokens[{index}] is a token of {len(token.encode()):,} bytes, more than "
                f"the limit of {C.MAX_TOKEN_BYTES:,}"
            )
    if kind == "gpt2" and str(metadata.get("tokenizer.ggml.pre", "default")) not in BYTE_LEVEL_SPLITS:
        pre = metadata.get("tokenizer.ggml.pre")
        raise ValueError(f"tokenizer.ggml.pre={pre!r} is not supported; supported: {sorted(BYTE_LEVEL_SPLITS)}")
    types = _numbers(metadata, "tokenizer.ggml.token_type", len(tokens), "iu")
    if types is not None:
        if not np.isin(types, TOKEN_TYPES).all():
            index = int(np.flatnonzero(~np.isin(types, TOKEN_TYPES))[0])
            raise ValueError(f"tokenizer.ggml.token_type[{index}]={types[index]} is not a llama.cpp token type")
        _check_added(tokens, types)
    for key in SPECIAL_ID_KEYS:
        value = metadata.get(key)
        if value is not None and not (type(value) is int and 0 <= value < len(tokens)):
            raise ValueError(f"{key}={value!r} is not the id of one of the {len(tokens):,} tokens")
    vocab = _vocab(tokens)
    merges = _strings(metadata, "tokenizer.ggml.merges")
    for index, merge in enumerate(merges or ()):
        left, space, right = merge.partition(" ")
        if not space or left not in vocab or right not in vocab or left + right not in vocab:
            raise ValueError(
                f"tokenizer.ggml.merges[{index}]={merge[:80]!r} is not a merge of two tokens of the "
                "vocabulary into a third"
            )
    if kind == "gpt2" and merges is None:
        raise ValueError("tokenizer.ggml.merges is missing (a gpt2 vocabulary merges by them)")
    if kind == "llama" and merges is None:
        if _numbers(metadata, "tokenizer.ggml.scores", len(tokens), "iuf") is None:
            raise ValueError("tokenizer.ggml.scores is missing (a llama vocabulary without merges merges by them)")
        work = sum(len(token) ** 2 for token in tokens)
        if work > C.MAX_SCORE_MERGE_WORK:
            raise ValueError(
                f"tokenizer.ggml.tokens: deriving merges from scores would slice {work:,} "
                f"characters, more than the limit of {C.MAX_SCORE_MERGE_WORK:,}"
            )


def _strings(metadata: Mapping[str, Any], key: str) -> list[str] | None:
    value = metadata.get(key)
    if value is not None and not (isinstance(value, list) and all(isinstance(item, str) for item in value)):
        raise ValueError(f"{key} is not an array of strings")
    return value


def _numbers(metadata: Mapping[str, Any], key: str, length: int, kinds: str) -> np.ndarray | None:
    """`metadata[key]`, an array of `length` finite numbers of numpy's `kinds` ("iu": integers), or None."""
    value = metadata.get(key)
    if value is None:
        return None
    if not isinstance(value, np.ndarray) or value.dtype.kind not in kinds or len(value) != length:
        raise ValueError(f"{key} is not an array of {length:,} numbers, one per token")
    if value.dtype.kind == "f" and not np.isfinite(value).all():
        raise ValueError(f"{key} holds a value that is not finite")
    return value


def _check_added(tokens: Sequence[str], types: np.ndarray) -> None:
    """Control and user-defined tokens are matched whole in text: each must be spelled, and spelled once."""
    added = {int(index) for index in np.flatnonzero(np.isin(types, (CONTROL_TOKEN_TYPE, USER_DEFINED_TOKEN_TYPE)))}
    for index in sorted(added):
        if not tokens[index]:
            raise ValueError(f"tokenizer.ggml.tokens[{index}] is an empty control or user-defined token")
    texts = {tokens[index] for index in added}
    first: dict[str, int] = {}
    for index, token in enumerate(tokens):
        if token in first and (index in added or first[token] in added):
            raise ValueError(
                f"tokenizer.ggml.tokens: the control or user-defined token {token[:80]!r} is both id "
                f"{first[token]} and id {index}"
            )
        if token in texts:
            first.setdefault(token, index)


def build_tokenizer(metadata: Mapping[str, Any]) -> Tokenizer:
    """The tokenizer `tokenizer.ggml.*` in `metadata` describes, control and user-defined tokens added whole
    (`metadata` passed `check_vocabulary`)."""
    tokens: Sequence[str] = metadata["tokenizer.ggml.tokens"]
    tokenizer = _BUILDERS[metadata["tokenizer.ggml.model"]](metadata, tokens)
    types: Sequence[int] = metadata.get("tokenizer.ggml.token_type", ())
    tokenizer.add_special_tokens(
        [
            AddedToken(token, normalized=False, special=True)
            for token, kind in zip(tokens, types)
            if kind == CONTROL_TOKEN_TYPE
        ]
    )
    tokenizer.add_tokens(
        [
            AddedToken(token, normalized=False, special=False)
            for token, kind in zip(tokens, types)
            if kind == USER_DEFINED_TOKEN_TYPE
        ]
    )
    return tokenizer


def _byte_level(metadata: Mapping[str, Any], tokens: Sequence[str]) -> Tokenizer:
    """GPT-2's byte-level BPE: the file's tokens are already spelled in the byte alphabet."""
    split = BYTE_LEVEL_SPLITS[str(metadata.get("tokenizer.ggml.pre", "default"))]
    merges = [tuple(merge.split(" ", 1)) for merge in metadata["tokenizer.ggml.merges"]]
    tokenizer = Tokenizer(models.BPE(vocab=_vocab(tokens), merges=merges, fuse_unk=False))
    steps: list[pre_tokenizers.PreTokenizer] = []
    if split.single_digits:
        steps.append(pre_tokenizers.Digits(individual_digits=True))
    if split.regex is not None:
        steps.append(pre_tokenizers.Split(Regex(split.regex), behavior="isolated"))
    steps.append(pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=split.regex is None))
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(steps)
    tokenizer.decoder = decoders.ByteLevel()
    return tokenizer


def _sentencepiece(metadata: Mapping[str, Any], tokens: Sequence[str]) -> Tokenizer:
    """SentencePiece BPE with byte fallback (Llama 2, Mistral), merges derived from the scores when
    the file lists none (transformers' `generate_merges`)."""
    vocab = _vocab(tokens)
    if "tokenizer.ggml.merges" in metadata:
        merges = [tuple(merge.split(" ", 1)) for merge in metadata["tokenizer.ggml.merges"]]
    else:
        merges = _merges_from_scores(vocab, dict(zip(tokens, metadata["tokenizer.ggml.scores"])))
    unk = metadata.get("tokenizer.ggml.unknown_token_id")
    tokenizer = Tokenizer(
        models.BPE(
            vocab=vocab,
            merges=merges,
            unk_token=None if unk is None else tokens[unk],
            fuse_unk=True,
            byte_fallback=True,
        )
    )
    prefix = bool(metadata.get("tokenizer.ggml.add_space_prefix", True))
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(
        replacement=SPIECE_UNDERLINE, split=False, prepend_scheme="first" if prefix else "never"
    )
    steps = [decoders.Replace(SPIECE_UNDERLINE, " "), decoders.ByteFallback(), decoders.Fuse()]
    tokenizer.decoder = decoders.Sequence(steps + ([decoders.Strip(content=" ", left=1, right=0)] if prefix else []))
    return tokenizer


def _vocab(tokens: Sequence[str]) -> dict[str, int]:
    vocab: dict[str, int] = {}
    for index, token in enumerate(tokens):
        vocab.setdefault(token, index)
    return vocab


def _merges_from_scores(vocab: Mapping[str, int], scores: Mapping[str, float]) -> list[tuple[str, str]]:
    """Every split of a token into two tokens, the best-scored tokens' merges first."""
    found: list[tuple[str, str, float]] = []
    for token, score in scores.items():
        pairs = [(token[:i], token[i:]) for i in range(1, len(token)) if token[:i] in vocab and token[i:] in vocab]
        found.extend((left, right, score) for left, right in sorted(pairs, key=lambda p: (vocab[p[0]], vocab[p[1]])))
    found.sort(key=lambda merge: (merge[2], len(merge[0]), len(merge[1])), reverse=True)
    return [(left, right) for left, right, _ in found]


_BUILDERS: Mapping[str, Callable[[Mapping[str, Any], Sequence[str]], Tokenizer]] = {
    "gpt2": _byte_level,
    "llama": _sentencepiece,
}
