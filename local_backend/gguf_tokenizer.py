"""A GGUF file's `tokenizer.ggml.*` metadata → a `tokenizers.Tokenizer`, as transformers' GGUF converter builds it.

A GGUF carries no `tokenizer.json`: llama.cpp stores the vocabulary, the merges (or, for
SentencePiece, the scores they are derived from), each token's type and the special ids as
metadata. `tokenizer.ggml.model` says which algorithm (`gpt2`: byte-level BPE; `llama`:
SentencePiece BPE with byte fallback) and `tokenizer.ggml.pre` how text is split before merging,
which is the one thing a GGUF names rather than stores: the splits here are llama.cpp's own for
each name it writes. An unknown model or pre-tokenizer is refused, naming it, rather than guessed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers

CONTROL_TOKEN_TYPE = 3
"""llama.cpp's `LLAMA_TOKEN_TYPE_CONTROL`: `<|im_end|>` and kin, matched whole and skipped on decode."""

USER_DEFINED_TOKEN_TYPE = 4
"""llama.cpp's `LLAMA_TOKEN_TYPE_USER_DEFINED`: added tokens such as `<think>`, matched whole, decoded as text."""

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


def build_tokenizer(metadata: Mapping[str, Any]) -> Tokenizer:
    """The tokenizer `tokenizer.ggml.*` in `metadata` describes, control and user-defined tokens added whole."""
    kind = metadata.get("tokenizer.ggml.model")
    builder = _BUILDERS.get(str(kind))
    if builder is None:
        raise ValueError(f"tokenizer.ggml.model={kind!r} is not supported; supported: {sorted(_BUILDERS)}")
    tokens: Sequence[str] = metadata["tokenizer.ggml.tokens"]
    tokenizer = builder(metadata, tokens)
    types: Sequence[int] = metadata.get("tokenizer.ggml.token_type") or ()
    tokenizer.add_special_tokens([AddedToken(token, normalized=False, special=True)
                                  for token, kind in zip(tokens, types) if kind == CONTROL_TOKEN_TYPE])  # fmt: skip
    tokenizer.add_tokens([AddedToken(token, normalized=False, special=False)
                          for token, kind in zip(tokens, types) if kind == USER_DEFINED_TOKEN_TYPE])  # fmt: skip
    return tokenizer


def _byte_level(metadata: Mapping[str, Any], tokens: Sequence[str]) -> Tokenizer:
    """GPT-2's byte-level BPE: the file's tokens are already spelled in the byte alphabet."""
    pre = str(metadata.get("tokenizer.ggml.pre", "default"))
    split = BYTE_LEVEL_SPLITS.get(pre)
    if split is None:
        raise ValueError(f"tokenizer.ggml.pre={pre!r} is not supported; supported: {sorted(BYTE_LEVEL_SPLITS)}")
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
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token=None if unk is None else tokens[unk],
                                     fuse_unk=True, byte_fallback=True))  # fmt: skip
    prefix = bool(metadata.get("tokenizer.ggml.add_space_prefix", True))
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(replacement=SPIECE_UNDERLINE, split=False,
                                                       prepend_scheme="first" if prefix else "never")  # fmt: skip
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
