"""A model file is input (local_backend/model/: gguf_file, gguf_loader, gguf_tokenizer, checkpoint, loader).

Each crafted GGUF file below is a tiny Llama written with the `gguf` package's `GGUFWriter`, then
given one defect: in the header and its counts, the metadata (sizes, types, values), the tensor
index (offsets, types, shapes, overlaps), the config against the tensors, the vocabulary, or cut
short in each section. Every one must be refused by `python -m local_backend serve` before it
listens: a non-zero exit, one `error:` line naming the key or tensor and the defect, no
traceback, within `REFUSAL_SECONDS` and `REFUSAL_PEAK_RSS`. The files go through the CLI's own
`main` a group at a time in one process (a few through `python -m local_backend` itself); the
untouched tiny file, and the real SmolLM2 file, still load and answer.
"""

from __future__ import annotations

import json
import os
import signal
import struct
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gguf
import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q
from gguf import GGUFValueType as V
from safetensors.numpy import save_file

from local_backend import Engine
from local_backend._constants import (
    GGUF_MAX_ARRAY_LENGTH,
    GGUF_MAX_HEADER_BYTES,
    GGUF_MAX_METADATA_ENTRIES,
    GGUF_MAX_STRING_BYTES,
)
from local_backend.sampling.sampling_params import SamplingParams

REFUSAL_SECONDS = 30
"""A refusal comes within this (the issue's bound); the whole group of files gets this much each."""
REFUSAL_PEAK_RSS = 1024**3
"""The stated memory bound of a refused load: the peak resident memory of the process that refused it, torch and
the server's imports included (about 0.4 GiB of it)."""

HIDDEN, LAYERS, HEADS, KV_HEADS, HEAD_DIM, FF, CONTEXT = 64, 2, 4, 2, 16, 128, 256
CONTROL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
MERGES = ["Ġ t", "h e", "Ġt he"]
TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
LAYER_SHAPES = {
    "attn_norm": (HIDDEN,),
    "ffn_norm": (HIDDEN,),
    "attn_q": (HEADS * HEAD_DIM, HIDDEN),
    "attn_k": (KV_HEADS * HEAD_DIM, HIDDEN),
    "attn_v": (KV_HEADS * HEAD_DIM, HIDDEN),
    "attn_output": (HIDDEN, HEADS * HEAD_DIM),
    "ffn_gate": (FF, HIDDEN),
    "ffn_up": (FF, HIDDEN),
    "ffn_down": (HIDDEN, FF),
}
"""numpy's order ([rows, row length]), as `GGUFWriter.add_tensor` takes arrays."""


def byte_alphabet() -> list[str]:
    """GPT-2's printable stand-ins for the 256 bytes (its `bytes_to_unicode`)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    extra = [byte for byte in range(256) if byte not in printable]
    return [chr(byte) for byte in printable] + [chr(256 + index) for index in range(len(extra))]


TOKENS = byte_alphabet() + ["Ġt", "he", "Ġthe"] + CONTROL
TYPES = [3 if token in CONTROL else 1 for token in TOKENS]
VOCAB = len(TOKENS)


def base_metadata() -> dict[str, tuple[Any, ...]]:
    """The tiny model's metadata beyond `general.architecture`: key → (value, GGUF type[, array item type])."""
    return {
        "llama.block_count": (LAYERS, V.UINT32),
        "llama.context_length": (CONTEXT, V.UINT32),
        "llama.embedding_length": (HIDDEN, V.UINT32),
        "llama.feed_forward_length": (FF, V.UINT32),
        "llama.attention.head_count": (HEADS, V.UINT32),
        "llama.attention.head_count_kv": (KV_HEADS, V.UINT32),
        "llama.rope.dimension_count": (HEAD_DIM, V.UINT32),
        "llama.rope.freq_base": (10000.0, V.FLOAT32),
        "llama.attention.layer_norm_rms_epsilon": (1e-5, V.FLOAT32),
        "llama.vocab_size": (VOCAB, V.UINT32),
        "general.name": ("tiny", V.STRING),
        "tokenizer.ggml.model": ("gpt2", V.STRING),
        "tokenizer.ggml.pre": ("default", V.STRING),
        "tokenizer.ggml.tokens": (TOKENS, V.ARRAY),
        "tokenizer.ggml.token_type": (TYPES, V.ARRAY, V.INT32),
        "tokenizer.ggml.merges": (MERGES, V.ARRAY),
        "tokenizer.ggml.bos_token_id": (TOKENS.index("<|im_start|>"), V.UINT32),
        "tokenizer.ggml.eos_token_id": (TOKENS.index("<|im_end|>"), V.UINT32),
        "tokenizer.chat_template": (TEMPLATE, V.STRING),
    }


def base_tensors() -> dict[str, np.ndarray]:
    """The tiny model's weights (tied embeddings), small random values."""
    rng = np.random.default_rng(0)
    shapes = {"token_embd.weight": (VOCAB, HIDDEN), "output_norm.weight": (HIDDEN,)}
    shapes |= {f"blk.{layer}.{name}.weight": shape for layer in range(LAYERS) for name, shape in LAYER_SHAPES.items()}
    return {
        name: (rng.standard_normal(shape) * 0.05 + (name.endswith("norm.weight"))).astype(np.float32)
        for name, shape in shapes.items()
    }


def write(path: Path, metadata: dict[str, Any] | None = None, tensors: dict[str, Any] | None = None) -> Path:
    """The tiny model with `metadata` entries replaced (None: removed) and `tensors` replaced (None: removed; an
    array, or (array, raw_shape, raw_dtype))."""
    writer = gguf.GGUFWriter(str(path), arch="llama")
    for key, entry in (base_metadata() | (metadata or {})).items():
        if entry is not None:
            writer.add_key_value(key, *entry)
    for name, tensor in (base_tensors() | (tensors or {})).items():
        if tensor is not None:
            data, raw_shape, raw_dtype = tensor if isinstance(tensor, tuple) else (tensor, None, None)
            writer.add_tensor(name, data, raw_shape=raw_shape, raw_dtype=raw_dtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def patched(path: Path, change: Callable[[gguf.GGUFReader], None], **written: Any) -> Path:
    """The tiny model written, then its bytes changed in place through `GGUFReader`'s writable views."""
    reader = gguf.GGUFReader(write(path, **written), "r+")
    change(reader)
    reader.data.flush()
    return path


def cut(path: Path, at: Callable[[gguf.GGUFReader], int]) -> Path:
    """The tiny model cut short at the byte `at` finds."""
    write(path)
    end = at(gguf.GGUFReader(path))
    with path.open("r+b") as handle:
        handle.truncate(end)
    return path


def tensor_field(reader: gguf.GGUFReader, name: str) -> Any:
    return next(tensor.field for tensor in reader.tensors if tensor.name == name)


def index_end(reader: gguf.GGUFReader) -> int:
    """Where the tensor index ends (the padding to the data starts)."""
    last = reader.tensors[-1].field
    return last.offset + sum(int(part.nbytes) for part in last.parts)


def inside_padding(reader: gguf.GGUFReader) -> int:
    """A byte inside the padding between the tensor index and the data (there must be some)."""
    assert reader.data_offset - index_end(reader) >= 2, "the tiny model's index ends next to its data"
    return index_end(reader) + 1


def set_part(reader: gguf.GGUFReader, key: str, part: int, value: Any) -> None:
    reader.fields[key].parts[part][0] = value


def set_offset(reader: gguf.GGUFReader, name: str, value: Callable[[int], int]) -> None:
    parts = tensor_field(reader, name).parts
    parts[5][0] = value(int(parts[5][0]))


def sentencepiece(tokens: list[str]) -> dict[str, Any]:
    """A SentencePiece vocabulary of `tokens` (scores, no merges) in place of the byte-level one."""
    return {
        "tokenizer.ggml.model": ("llama", V.STRING),
        "tokenizer.ggml.tokens": (tokens, V.ARRAY),
        "tokenizer.ggml.scores": ([0.0] * len(tokens), V.ARRAY, V.FLOAT32),
        "tokenizer.ggml.merges": None,
        "tokenizer.ggml.token_type": ([1] * len(tokens), V.ARRAY, V.INT32),
    }


def header_of_short_strings(path: Path) -> Path:
    """A header past `GGUF_MAX_HEADER_BYTES` made of the smallest strings: the most values a refused header makes
    the loader hold (four arrays of a million two-byte strings, written by hand: `GGUFWriter` packs each alone)."""
    strings = (struct.pack("<Q", 2) + b"ab") * GGUF_MAX_ARRAY_LENGTH
    arrays = [
        struct.pack("<Q", len(key)) + key + struct.pack("<IIQ", V.ARRAY, V.STRING, GGUF_MAX_ARRAY_LENGTH) + strings
        for key in (b"general.s0", b"general.s1", b"general.s2", b"general.s3")
    ]
    path.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 0, len(arrays)) + b"".join(arrays))
    return path


def _first_layer(name: str) -> str:
    return f"blk.0.{name}.weight"


E = np.float32
CASES: dict[str, tuple[Callable[[Path], Path], str]] = {
    # the header and its counts
    "empty file": (lambda p: (p.write_bytes(b""), p)[1], "the file is 0 bytes, shorter than a GGUF header"),
    "header cut short": (lambda p: cut(p, lambda r: 20), "the file is 20 bytes, shorter than a GGUF header"),
    "wrong magic": (
        lambda p: patched(p, lambda r: r.data.__setitem__(slice(0, 4), list(b"GGML"))),
        "not a GGUF file: it starts with b'GGML'",
    ),
    "version 1": (lambda p: patched(p, lambda r: set_part(r, "GGUF.version", 0, 1)), "GGUF version 1 is not supported"),
    "big-endian": (lambda p: patched(p, lambda r: set_part(r, "GGUF.version", 0, 3 << 24)), "a big-endian GGUF file"),
    "3,000,000 metadata entries claimed": (
        lambda p: patched(p, lambda r: set_part(r, "GGUF.kv_count", 0, 3_000_000)),
        "the header claims 3,000,000 metadata entries, more than the limit",
    ),
    "2**40 tensors claimed": (
        lambda p: patched(p, lambda r: set_part(r, "GGUF.tensor_count", 0, 2**40)),
        "the header claims 1,099,511,627,776 tensors, more than the limit",
    ),
    "metadata entries past the limit": (
        lambda p: write(p, {f"general.k{index}": (index, V.UINT32) for index in range(GGUF_MAX_METADATA_ENTRIES)}),
        f"metadata entries, more than the limit of {GGUF_MAX_METADATA_ENTRIES:,}",
    ),
    # metadata values
    "a UINT8 array claiming 2**62 entries": (
        lambda p: patched(
            p, lambda r: set_part(r, "general.junk", 4, 2**62), metadata={"general.junk": ([1, 2, 3], V.ARRAY, V.UINT8)}
        ),
        "metadata 'general.junk' is an array of 4,611,686,018,427,387,904 entries, more than the limit",
    ),
    "a string array claiming 10,000,000 entries": (
        lambda p: patched(
            p,
            lambda r: set_part(r, "general.tags", 4, 10_000_000),
            metadata={"general.tags": (["a", "b", "c"], V.ARRAY)},
        ),
        "metadata 'general.tags' is an array of 10,000,000 entries, more than the limit",
    ),
    "an array past the length limit": (
        lambda p: write(p, {"general.junk": (bytes(GGUF_MAX_ARRAY_LENGTH + 1), V.ARRAY)}),
        f"metadata 'general.junk' is an array of {GGUF_MAX_ARRAY_LENGTH + 1:,} entries",
    ),
    "a header of short strings past the size limit": (
        header_of_short_strings,
        f"the metadata and tensor index pass the limit of {GGUF_MAX_HEADER_BYTES:,} bytes at metadata 'general.s3'[",
    ),
    "a string past the size limit": (
        lambda p: write(p, {"general.description": ("x" * (GGUF_MAX_STRING_BYTES + 1), V.STRING)}),
        f"metadata 'general.description' is a string of {GGUF_MAX_STRING_BYTES + 1:,} bytes, more than the limit",
    ),
    "a string that is not UTF-8": (
        lambda p: patched(p, lambda r: r.fields["general.name"].parts[-1].__setitem__(slice(0, 2), [0xFF, 0xFE])),
        "metadata 'general.name' is not UTF-8 text",
    ),
    "an undefined value type": (
        lambda p: patched(p, lambda r: set_part(r, "general.name", 2, 99)),
        "metadata 'general.name' has value type 99, which GGUF does not define",
    ),
    "a key twice": (
        lambda p: patched(
            p,
            lambda r: r.fields["general.bbbb"].parts[1].__setitem__(slice(8, 12), list(b"aaaa")),
            metadata={"general.aaaa": (1, V.UINT32), "general.bbbb": (2, V.UINT32)},
        ),
        "metadata key 'general.aaaa' appears twice",
    ),
    "an array of arrays": (
        lambda p: write(p, {"general.nested": ([[1, 2], [3, 4]], V.ARRAY)}),
        "metadata 'general.nested' is an array of arrays",
    ),
    "an alignment that is no power of two": (
        lambda p: write(p, {"general.alignment": (48, V.UINT32)}),
        "general.alignment=48 is not a power of two",
    ),
    "an alignment that is a string": (
        lambda p: write(p, {"general.alignment": ("32", V.STRING)}),
        "general.alignment='32' is not a power of two",
    ),
    # the tensor index against the file
    "a tensor offset of 2**64-1": (
        lambda p: patched(p, lambda r: set_offset(r, "token_embd.weight", lambda o: 2**64 - 1)),
        f"tensor 'token_embd.weight': its {VOCAB * HIDDEN * 4:,} bytes at data offset "
        "18,446,744,073,709,551,615 end past the end of the file",
    ),
    "a misaligned offset overlapping another tensor": (
        lambda p: patched(p, lambda r: set_offset(r, _first_layer("attn_q"), lambda o: o + 4)),
        "tensor 'blk.0.attn_q.weight': its data offset",
    ),
    "every tensor aliasing offset 0": (
        lambda p: patched(p, lambda r: [set_offset(r, t.name, lambda o: 0) for t in r.tensors]),
        "overlap",
    ),
    "a tensor past the end of the file": (
        lambda p: patched(p, lambda r: set_offset(r, r.tensors[-1].name, lambda o: o + 2**20)),
        "tensor 'blk.1.ffn_down.weight': its 32,768 bytes at data offset",
    ),
    "one value stored where 64 are declared": (
        lambda p: write(p, tensors={"output_norm.weight": (np.ones(1, E), (HIDDEN,), Q.F32)}),
        "tensors 'output_norm.weight' (bytes",
    ),
    "an undefined ggml type": (
        lambda p: patched(p, lambda r: tensor_field(r, "output_norm.weight").parts[4].__setitem__(0, 1000)),
        "tensor 'output_norm.weight' is of ggml type 1000, which ggml does not define",
    ),
    "a type the engine does not run": (
        lambda p: patched(p, lambda r: tensor_field(r, "output_norm.weight").parts[4].__setitem__(0, int(Q.I32))),
        "tensor 'output_norm.weight' is of type I32, which is not supported",
    ),
    "five dimensions": (
        lambda p: write(p, tensors={"output_norm.weight": np.ones((1, 1, 1, 1, HIDDEN), E)}),
        "tensor 'output_norm.weight' has 5 dimensions",
    ),
    "a dimension of 0": (
        lambda p: patched(p, lambda r: tensor_field(r, "output_norm.weight").parts[3].__setitem__(0, 0)),
        "tensor 'output_norm.weight' has dims [0]: every dimension must be at least 1",
    ),
    "a tensor twice": (
        lambda p: patched(
            p,
            lambda r: (
                tensor_field(r, _first_layer("attn_v")).parts[1].__setitem__(slice(0, 19), list(b"blk.0.attn_k.weight"))
            ),
        ),
        "tensor 'blk.0.attn_k.weight' appears twice in the tensor index",
    ),
    "a tensor name past ggml's limit": (
        lambda p: write(p, tensors={"x" * 70: np.ones(4, E)}),
        "is a string of 70 bytes, more than the limit of 63",
    ),
    "quantized rows that are not whole blocks": (
        lambda p: patched(
            p,
            lambda r: tensor_field(r, _first_layer("ffn_down")).parts[3].__setitem__(0, 100),
            tensors={
                _first_layer("ffn_down"): (
                    gguf.quants.quantize(base_tensors()[_first_layer("ffn_down")], Q.Q8_0),
                    None,
                    Q.Q8_0,
                )
            },
        ),
        "tensor 'blk.0.ffn_down.weight': its rows of 100 values are not whole Q8_0 blocks of 32",
    ),
    # the config against the tensors
    "llama.block_count = 1,000,000": (
        lambda p: write(p, {"llama.block_count": (1_000_000, V.UINT32)}),
        "llama.block_count=1000000, but the file holds no tensor of layer 2",
    ),
    "one layer more than the file holds": (
        lambda p: write(p, {"llama.block_count": (LAYERS + 1, V.UINT32)}),
        f"llama.block_count={LAYERS + 1}, but the file holds no tensor of layer 2",
    ),
    "one layer fewer than the file holds": (
        lambda p: write(p, {"llama.block_count": (LAYERS - 1, V.UINT32)}),
        f"llama.block_count={LAYERS - 1}, but the file holds tensors of layer 1",
    ),
    "one element where the config implies 64": (
        lambda p: write(p, tensors={"output_norm.weight": np.ones(1, E)}),
        "tensor 'output_norm.weight' has shape [1], but the config implies [64]",
    ),
    "an embedding of another vocabulary size": (
        lambda p: write(p, {"llama.vocab_size": (VOCAB + 1, V.UINT32)}),
        f"tensor 'token_embd.weight' has shape [{VOCAB}, 64], but the config implies [{VOCAB + 1}, 64]",
    ),
    "a projection transposed": (
        lambda p: write(p, tensors={_first_layer("attn_k"): np.zeros((HIDDEN, KV_HEADS * HEAD_DIM), E)}),
        "tensor 'blk.0.attn_k.weight' has shape [64, 32], but the config implies [32, 64]",
    ),
    "a tensor missing": (
        lambda p: write(p, tensors={"blk.1.ffn_down.weight": None}),
        "tensor 'blk.1.ffn_down.weight' is missing",
    ),
    "no heads": (
        lambda p: write(p, {"llama.attention.head_count": (0, V.UINT32)}),
        "llama.attention.head_count=0 is not a positive integer",
    ),
    "key/value heads that do not divide the heads": (
        lambda p: write(p, {"llama.attention.head_count_kv": (3, V.UINT32)}),
        "llama.attention.head_count=4 is not a multiple of llama.attention.head_count_kv=3",
    ),
    "a layer count that is a string": (
        lambda p: write(p, {"llama.block_count": ("2", V.STRING)}),
        "llama.block_count='2' is not a positive integer",
    ),
    "a layer count missing": (lambda p: write(p, {"llama.block_count": None}), "llama.block_count is missing"),
    "a context of 0": (
        lambda p: write(p, {"llama.context_length": (0, V.UINT32)}),
        "llama.context_length=0 is not a positive integer",
    ),
    "a norm epsilon that is NaN": (
        lambda p: write(p, {"llama.attention.layer_norm_rms_epsilon": (float("nan"), V.FLOAT32)}),
        "llama.attention.layer_norm_rms_epsilon=nan is not a positive finite number",
    ),
    "an infinite rotary base": (
        lambda p: write(p, {"llama.rope.freq_base": (float("inf"), V.FLOAT32)}),
        "llama.rope.freq_base=inf is not a positive finite number",
    ),
    # the vocabulary
    "a 2 MB token": (
        lambda p: write(p, sentencepiece(["a" * 2_000_000] + TOKENS[1:])),
        "metadata 'tokenizer.ggml.tokens'[0] is a string of 2,000,000 bytes, more than the limit",
    ),
    "a token past the token limit": (
        lambda p: write(p, sentencepiece(["a" * 2000] + TOKENS[1:])),
        "tokenizer.ggml.tokens[0] is a token of 2,000 bytes, more than the limit",
    ),
    "a SentencePiece chain too long to derive merges from": (
        lambda p: write(p, sentencepiece(["a" * (1024 - index) for index in range(VOCAB)])),
        "tokenizer.ggml.tokens: deriving merges from scores would slice",
    ),
    "a control token twice": (
        lambda p: write(p, {"tokenizer.ggml.tokens": (TOKENS[:-1] + ["<|im_start|>"], V.ARRAY)}),
        f"the control or user-defined token '<|im_start|>' is both id {VOCAB - 2} and id {VOCAB - 1}",
    ),
    "an empty control token": (
        lambda p: write(p, {"tokenizer.ggml.tokens": (TOKENS[:-1] + [""], V.ARRAY)}),
        f"tokenizer.ggml.tokens[{VOCAB - 1}] is an empty control or user-defined token",
    ),
    "token types of another length": (
        lambda p: write(p, {"tokenizer.ggml.token_type": (TYPES[:-1], V.ARRAY, V.INT32)}),
        f"tokenizer.ggml.token_type is not an array of {VOCAB} numbers, one per token",
    ),
    "an end-of-sequence id past the vocabulary": (
        lambda p: write(p, {"tokenizer.ggml.eos_token_id": (1_000_000, V.UINT32)}),
        "tokenizer.ggml.eos_token_id=1000000 is not the id of one of the",
    ),
    "a merge of a token the vocabulary lacks": (
        lambda p: write(p, {"tokenizer.ggml.merges": (["Ġ t", "h QQ"], V.ARRAY)}),
        "tokenizer.ggml.merges[1]='h QQ' is not a merge of two tokens of the vocabulary into a third",
    ),
    "a merge whose result the vocabulary lacks": (
        lambda p: write(p, {"tokenizer.ggml.merges": (["a b"], V.ARRAY)}),
        "tokenizer.ggml.merges[0]='a b' is not a merge",
    ),
    "tokens that are numbers": (
        lambda p: write(p, {"tokenizer.ggml.tokens": (list(range(VOCAB)), V.ARRAY, V.UINT32)}),
        "tokenizer.ggml.tokens is not an array of strings",
    ),
    "fewer tokens than embedding rows": (
        lambda p: write(
            p,
            {
                "tokenizer.ggml.tokens": (TOKENS[:-1], V.ARRAY),
                "tokenizer.ggml.token_type": (TYPES[:-1], V.ARRAY, V.INT32),
            },
        ),
        f"tokenizer.ggml.tokens holds {VOCAB - 1} tokens, but token_embd.weight has {VOCAB} rows",
    ),
    "SentencePiece without scores": (
        lambda p: write(p, sentencepiece(TOKENS) | {"tokenizer.ggml.scores": None}),
        "tokenizer.ggml.scores is missing",
    ),
    "a chat template that is a number": (
        lambda p: write(p, {"tokenizer.chat_template": (5, V.UINT32)}),
        "tokenizer.chat_template is not a string",
    ),
    # cut short in each section
    "cut inside the metadata": (
        lambda p: cut(p, lambda r: r.fields["tokenizer.ggml.tokens"].offset + 100),
        "the file ends inside metadata 'tokenizer.ggml.tokens'",
    ),
    "cut inside the tensor index": (
        lambda p: cut(p, lambda r: r.tensors[3].field.offset + 40),
        "the file ends inside the index entry of tensor",
    ),
    "cut inside the padding": (
        lambda p: cut(p, inside_padding),
        "the file ends inside the padding before the tensor data",
    ),
    "cut before the data": (lambda p: cut(p, lambda r: r.data_offset), "end past the end of the file (0 bytes"),
    "cut inside the data": (
        lambda p: cut(p, lambda r: len(r.data) - 1),
        "tensor 'blk.1.ffn_down.weight': its 32,768 bytes at data offset",
    ),
}
"""Each crafted file: how it is made, and what its `error:` line must say."""

DRIVER = """
import sys, time, traceback
from local_backend.__main__ import main
for path in sys.argv[1:]:
    print(f"=== {path}", file=sys.stderr, flush=True)
    started = time.monotonic()
    try:
        code = main(["serve", "--model", path, "--port", "0", "--device", "cpu"])
    except BaseException:
        traceback.print_exc()
        code = "raised"
    print(f"=== exit {code} after {time.monotonic() - started:.3f} s", file=sys.stderr, flush=True)
"""
"""Runs the CLI's `main` on each file in turn, as `python -m local_backend serve --model FILE` does, and reports
each exit and its time."""

MEASURER = """
import os, subprocess, sys
child = subprocess.Popen(sys.argv[1:])
_, status, usage = os.wait4(child.pid, 0)
print(f"=== peak {usage.ru_maxrss * 1024}", flush=True)
sys.exit(os.waitstatus_to_exitcode(status))
"""
"""Runs a command and prints its peak resident memory. Linux counts a child's peak from the memory of the process
that started it (a fork copies it, an exec records it), so a small process of its own starts the command: the
figure is the command's, not the test runner's."""


def run_bounded(command: list[str], timeout: float) -> tuple[int, str, int]:
    """(exit status, output, peak resident bytes) of `command`, killed past `timeout` seconds."""
    measured = subprocess.Popen(
        [sys.executable, "-c", MEASURER, *command],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=os.environ | {"PYTHONUNBUFFERED": "1"},
        start_new_session=True,
    )
    killer = threading.Timer(timeout, os.killpg, (measured.pid, signal.SIGKILL))
    killer.start()
    try:
        output, _ = measured.communicate()
    finally:
        killer.cancel()
    lines = output.splitlines()
    peak = next((int(line.removeprefix("=== peak ")) for line in lines if line.startswith("=== peak ")), -1)
    return measured.returncode, output, peak


def error_lines(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith("error:")]


@pytest.fixture(scope="module")
def crafted(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("crafted")
    return {name: build(folder / f"case{index:02d}.gguf") for index, (name, (build, _)) in enumerate(CASES.items())}


@pytest.fixture(scope="module")
def refusals(crafted: dict[str, Path]) -> dict[str, tuple[str, float, int]]:
    """Each file's (output, seconds, peak RSS of the process that refused them all) from one run of `DRIVER`."""
    code, output, peak = run_bounded(
        [sys.executable, "-c", DRIVER, *map(str, crafted.values())], REFUSAL_SECONDS * len(crafted)
    )
    assert code == 0 and peak > 0, output[-3000:]
    found: dict[str, tuple[str, float, int]] = {}
    path, body = "", []
    for line in output.splitlines():
        if line.startswith("=== exit "):
            exit_code, _, seconds, _ = line.removeprefix("=== exit ").split()
            found[path] = ("\n".join([f"exit {exit_code}", *body]), float(seconds), peak)
        elif line.startswith("=== peak "):
            break
        elif line.startswith("=== "):
            path, body = line.removeprefix("=== "), []
        else:
            body.append(line)
    return {name: found[str(path)] for name, path in crafted.items()}


def test_there_are_at_least_thirty_crafted_files() -> None:
    assert len(CASES) >= 30


@pytest.mark.parametrize("name", list(CASES))
def test_a_crafted_file_is_refused_with_one_line_naming_the_defect(
    refusals: dict[str, tuple[str, float, int]], name: str
) -> None:
    output, seconds, peak = refusals[name]
    assert output.startswith("exit 2\n"), output
    assert "Traceback" not in output and "numpy" not in output, output
    [line] = error_lines(output)
    assert CASES[name][1] in line, line
    assert line.count("\n") == 0 and "case" in line, line  # names the file
    assert seconds < REFUSAL_SECONDS and peak < REFUSAL_PEAK_RSS, (seconds, peak)


@pytest.mark.parametrize(
    "name", ["llama.block_count = 1,000,000", "a UINT8 array claiming 2**62 entries", "a 2 MB token"]
)
def test_the_command_line_refuses_a_crafted_file_before_it_listens(crafted: dict[str, Path], name: str) -> None:
    code, output, peak = run_bounded(
        [sys.executable, "-m", "local_backend", "serve", "--model", str(crafted[name]), "--port", "0"], REFUSAL_SECONDS
    )
    assert code == 2, output
    assert "Traceback" not in output and "ready at" not in output, output
    [line] = error_lines(output)
    assert CASES[name][1] in line, line
    assert 0 < peak < REFUSAL_PEAK_RSS, peak


def test_the_untouched_tiny_file_loads_and_answers(tmp_path: Path) -> None:
    engine = Engine.from_pretrained(
        write(tmp_path / "tiny.gguf"), device="cpu", max_model_len=CONTEXT, kv_cache_memory=2**20
    )
    try:
        prompt = engine.tokenizer.chat_prompt([{"role": "user", "content": "the"}])
        [out] = engine.generate([prompt], SamplingParams(max_tokens=4, temperature=0, ignore_eos=True))
        assert len(out.token_ids) == 4 and all(0 <= token < VOCAB for token in out.token_ids)
    finally:
        engine.close()


def test_the_real_smollm2_file_loads_and_answers() -> None:
    engine = Engine.from_pretrained("smollm2-135m-instruct", device="cpu", max_model_len=256, kv_cache_memory=2**23)
    try:
        prompt = engine.tokenizer.chat_prompt([{"role": "user", "content": "What is the capital of France?"}])
        [out] = engine.generate([prompt], SamplingParams(max_tokens=8, temperature=0))
        assert "Paris" in out.text, out.text
    finally:
        engine.close()


def _checkpoint_dir(tmp_path: Path, config: dict[str, Any], drop: str | None = None) -> Path:
    """A tiny Hugging Face directory: the bundled checkpoint's tokenizer files, `config` and random weights."""
    from local_backend.model.checkpoint import expected_shapes
    from local_backend.model.config import ModelConfig
    from local_backend.model.model_names import resolve_model

    default = resolve_model("default")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (tmp_path / name).write_bytes((default / name).read_bytes())
    (tmp_path / "config.json").write_text(json.dumps(config))
    shapes = expected_shapes(ModelConfig.from_dict(config | {"num_hidden_layers": 2}))
    save_file(
        {name: np.zeros(shape, np.float32) for name, shape in shapes.items() if name != drop},
        str(tmp_path / "model.safetensors"),
    )
    return tmp_path


HF_CONFIG = {
    "model_type": "llama",
    "vocab_size": 32000,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "tie_word_embeddings": True,
}


@pytest.mark.parametrize(
    ("config", "drop", "says"),
    [
        (
            HF_CONFIG | {"num_hidden_layers": 1_000_000},
            None,
            "num_hidden_layers=1000000, but the file holds no tensor of layer 2",
        ),
        (HF_CONFIG | {"hidden_size": 128}, None, "], but the config implies ["),
        (HF_CONFIG | {"num_attention_heads": "4"}, None, "num_attention_heads='4' is not a positive integer"),
        ({k: v for k, v in HF_CONFIG.items() if k != "vocab_size"}, None, "vocab_size is missing"),
        (HF_CONFIG, "model.layers.1.mlp.down_proj.weight", "tensor 'model.layers.1.mlp.down_proj.weight' is missing"),
    ],
)
def test_a_checkpoint_directory_whose_config_and_tensors_disagree_is_refused_naming_them(
    tmp_path: Path, config: dict[str, Any], drop: str | None, says: str
) -> None:
    directory = _checkpoint_dir(tmp_path, HF_CONFIG, drop)
    (directory / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError) as raised:
        Engine.from_pretrained(directory, device="cpu")
    assert says in str(raised.value) and "\n" not in str(raised.value)


def test_a_tokenizer_json_with_ids_past_the_embedding_is_refused_naming_one(tmp_path: Path) -> None:
    directory = _checkpoint_dir(tmp_path, HF_CONFIG | {"vocab_size": 1000})
    with pytest.raises(ValueError) as raised:
        Engine.from_pretrained(directory, device="cpu")
    assert str(raised.value).startswith("tokenizer.json: token ")
    assert "past the vocab_size=1000 rows of the embedding" in str(raised.value)
