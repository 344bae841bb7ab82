"""A GGUF file's header, read within stated bounds and checked against the file before any tensor is touched.

GGUF (ggml's `docs/gguf.md`): the magic `GGUF`, a version, the tensor and key/value counts, the
key/value pairs (typed scalars, strings, arrays), one entry per tensor (name, dims, ggml type,
offset), padding to `general.alignment`, then the tensor data. The `gguf` package's `GGUFReader`
believes every count and length it reads: an array claiming 2**62 entries, or millions of keys,
keep it allocating for minutes. This reader checks each count and length against the bounds in
`_constants` and against the bytes left before it reads on, and each tensor against the file: its
type known, its rows whole blocks of that type, its data aligned, inside the file and overlapping
no other tensor. Every refusal is one `ModelFileError` line naming the key or tensor. The data is
then a view of the file mapped in memory, read only when a tensor is reached.
"""

from __future__ import annotations

import math
import mmap
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFValueType
from gguf.quants import quant_shape_to_byte_shape

from local_backend import _constants as C
from local_backend.model.checkpoint import ModelFileError

GGUF_MAGIC = b"GGUF"
SUPPORTED_VERSIONS = (2, 3)
"""Versions 2 and 3 share one little-endian layout (version 1 had 32-bit counts)."""
ALIGNMENT_KEY = "general.alignment"
DEFAULT_ALIGNMENT = 32

_SCALARS = {
    GGUFValueType.UINT8: "B",
    GGUFValueType.INT8: "b",
    GGUFValueType.UINT16: "H",
    GGUFValueType.INT16: "h",
    GGUFValueType.UINT32: "I",
    GGUFValueType.INT32: "i",
    GGUFValueType.FLOAT32: "f",
    GGUFValueType.BOOL: "?",
    GGUFValueType.UINT64: "Q",
    GGUFValueType.INT64: "q",
    GGUFValueType.FLOAT64: "d",
}
"""Each scalar value type's `struct` (and numpy) code; every value is little-endian."""

_FIXED_HEADER = struct.Struct("<4sIQQ")
"""magic, version, tensor count, key/value count."""
_LENGTH = struct.Struct("<Q")
"""A string's length in bytes, before its bytes."""


@dataclass(frozen=True, slots=True)
class TensorInfo:
    """One entry of the tensor index, checked against the file."""

    name: str
    dims: tuple[int, ...]
    """ggml's order: `dims[0]` is the length of a row (numpy's last axis)."""
    kind: GGMLQuantizationType
    start: int
    """The first byte of the data in the file."""
    nbytes: int

    @property
    def shape(self) -> tuple[int, ...]:
        """The shape in numpy's (and torch's) order."""
        return self.dims[::-1]


@dataclass(frozen=True, slots=True)
class GGUFFile:
    """A GGUF file's metadata (numeric arrays as numpy arrays), its tensor index and its mapped bytes."""

    path: Path
    metadata: dict[str, Any]
    tensors: tuple[TensorInfo, ...]
    _data: mmap.mmap

    def fail(self, defect: str) -> ModelFileError:
        """The error naming this file and `defect`."""
        return ModelFileError(f"{self.path.name}: {defect}")

    def raw(self, tensor: TensorInfo) -> np.ndarray:
        """The tensor's bytes, shaped as `gguf.quants.dequantize` takes them (rows of blocks), not copied."""
        data = np.frombuffer(self._data, np.uint8, count=tensor.nbytes, offset=tensor.start)
        return data.reshape(quant_shape_to_byte_shape(tensor.shape, tensor.kind))


def read_gguf(path: Path) -> GGUFFile:
    """Read and check `path`'s header (see the module docstring); `ModelFileError` names the first defect."""
    size = path.stat().st_size
    if size < _FIXED_HEADER.size:
        raise ModelFileError(
            f"{path.name}: the file is {size} bytes, shorter than a GGUF header ({_FIXED_HEADER.size})"
        )
    with path.open("rb") as handle:
        data = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
    reader = _HeaderReader(path, data, size)
    metadata, entries = reader.read()
    alignment = metadata.get(ALIGNMENT_KEY, DEFAULT_ALIGNMENT)
    if type(alignment) is not int or alignment <= 0 or alignment & (alignment - 1):
        raise reader.fail(f"{ALIGNMENT_KEY}={alignment!r} is not a power of two")
    data_start = -(-reader.pos // alignment) * alignment
    if entries and data_start > size:
        raise reader.fail(f"the file ends inside the padding before the tensor data (byte {size:,} of {data_start:,})")
    tensors = tuple(_tensor(reader, data_start, alignment, *entry) for entry in entries)
    names: set[str] = set()
    for tensor in tensors:
        if tensor.name in names:
            raise reader.fail(f"tensor {tensor.name!r} appears twice in the tensor index")
        names.add(tensor.name)
    ordered = sorted(tensors, key=lambda tensor: tensor.start)
    for before, after in zip(ordered, ordered[1:]):
        if after.start < before.start + before.nbytes:
            raise reader.fail(
                f"tensors {before.name!r} (bytes {before.start:,} to {before.start + before.nbytes:,}) "
                f"and {after.name!r} (from byte {after.start:,}) overlap"
            )
    return GGUFFile(path, metadata, tensors, data)


def _tensor(
    reader: _HeaderReader, data_start: int, alignment: int, name: str, dims: tuple[int, ...], kind: int, offset: int
) -> TensorInfo:
    """One tensor's entry, checked: its type, its rows, its data's place in the file."""
    try:
        qtype = GGMLQuantizationType(kind)
    except ValueError:
        raise reader.fail(f"tensor {name!r} is of ggml type {kind}, which ggml does not define") from None
    if min(dims) < 1:
        raise reader.fail(f"tensor {name!r} has dims {list(dims)}: every dimension must be at least 1")
    block, block_bytes = GGML_QUANT_SIZES[qtype]
    if dims[0] % block:
        raise reader.fail(f"tensor {name!r}: its rows of {dims[0]} values are not whole {qtype.name} blocks of {block}")
    nbytes = math.prod(dims) // block * block_bytes
    start = data_start + offset
    if start + nbytes > reader.size:
        raise reader.fail(
            f"tensor {name!r}: its {nbytes:,} bytes at data offset {offset:,} end past the end of "
            f"the file ({max(reader.size - data_start, 0):,} bytes of tensor data)"
        )
    if offset % alignment:
        raise reader.fail(
            f"tensor {name!r}: its data offset {offset:,} is not a multiple of {ALIGNMENT_KEY}={alignment}"
        )
    return TensorInfo(name, dims, qtype, start, nbytes)


class _HeaderReader:
    """Reads the header front to back, each length checked against the file and the bounds before use."""

    def __init__(self, path: Path, data: mmap.mmap, size: int) -> None:
        self.path = path
        self.data = data
        self.size = size
        self.pos = 0

    def fail(self, defect: str) -> ModelFileError:
        return ModelFileError(f"{self.path.name}: {defect}")

    def read(self) -> tuple[dict[str, Any], list[tuple[str, tuple[int, ...], int, int]]]:
        """The metadata and the tensor index's entries (name, dims, type, offset) as the file gives them."""
        magic, version, tensor_count, kv_count = _FIXED_HEADER.unpack_from(self.data, 0)
        if magic != GGUF_MAGIC:
            raise self.fail(f"not a GGUF file: it starts with {magic!r}, not {GGUF_MAGIC!r}")
        if version & 0xFFFF == 0:
            raise self.fail("a big-endian GGUF file, which this loader does not read")
        if version not in SUPPORTED_VERSIONS:
            raise self.fail(f"GGUF version {version} is not supported; supported: {SUPPORTED_VERSIONS}")
        if kv_count > C.GGUF_MAX_METADATA_ENTRIES:
            raise self.fail(
                f"the header claims {kv_count:,} metadata entries, more than the limit of "
                f"{C.GGUF_MAX_METADATA_ENTRIES:,}"
            )
        if tensor_count > C.GGUF_MAX_TENSORS:
            raise self.fail(
                f"the header claims {tensor_count:,} tensors, more than the limit of {C.GGUF_MAX_TENSORS:,}"
            )
        self.pos = _FIXED_HEADER.size
        metadata: dict[str, Any] = {}
        for index in range(kv_count):
            key = self.string(f"metadata key #{index}", C.GGUF_MAX_KEY_BYTES)
            if key in metadata:
                raise self.fail(f"metadata key {key!r} appears twice")
            metadata[key] = self.value(self.scalar("I", f"metadata {key!r}"), f"metadata {key!r}")
        entries = []
        for index in range(tensor_count):
            name = self.string(f"the name of tensor #{index}", C.GGML_MAX_NAME - 1)
            what = f"the index entry of tensor {name!r}"
            n_dims = self.scalar("I", what)
            if not 1 <= n_dims <= C.GGML_MAX_DIMS:
                raise self.fail(f"tensor {name!r} has {n_dims} dimensions; a ggml tensor has 1 to {C.GGML_MAX_DIMS}")
            dims = struct.unpack_from(f"<{n_dims}Q", self.data, self.take(8 * n_dims, what))
            entries.append((name, dims, self.scalar("I", what), self.scalar("Q", what)))
        return metadata, entries

    def take(self, count: int, what: str) -> int:
        """Step over `count` bytes of `what`, returning where they start."""
        start, end = self.pos, self.pos + count
        if end > self.size:
            raise self.fail(f"the file ends inside {what} (byte {self.size:,}; {end:,} needed)")
        if end > C.GGUF_MAX_HEADER_BYTES:
            raise self.fail(
                f"the metadata and tensor index pass the limit of {C.GGUF_MAX_HEADER_BYTES:,} bytes at {what}"
            )
        self.pos = end
        return start

    def scalar(self, code: str, what: str) -> Any:
        return struct.unpack_from(f"<{code}", self.data, self.take(struct.calcsize(code), what))[0]

    def string(self, what: str, limit: int) -> str:
        length = self.scalar("Q", what)
        if length > limit:
            raise self.fail(f"{what} is a string of {length:,} bytes, more than the limit of {limit:,}")
        start = self.take(length, what)
        try:
            return self.data[start : start + length].decode("utf-8")
        except UnicodeDecodeError:
            raise self.fail(f"{what} is not UTF-8 text") from None

    def strings(self, count: int, what: str) -> list[str]:
        """`count` strings of the array `what`: `string`'s checks in one loop, a message formatted only to fail
        (a vocabulary holds a few hundred thousand)."""
        data, end_of_header = self.data, min(self.size, C.GGUF_MAX_HEADER_BYTES)
        values, pos = [], self.pos
        try:
            for _ in range(count):
                (length,) = _LENGTH.unpack_from(data, pos)  # struct.error past the end of the file
                end = pos + _LENGTH.size + length
                if length > C.GGUF_MAX_STRING_BYTES or end > end_of_header:
                    raise ValueError
                values.append(data[pos + _LENGTH.size : end].decode("utf-8"))
                pos = end
        except (struct.error, ValueError):  # UnicodeDecodeError is a ValueError
            self.pos = pos
            self.string(f"{what}[{len(values)}]", C.GGUF_MAX_STRING_BYTES)  # raises, naming the defect
            raise
        self.pos = pos
        return values

    def value(self, kind: int, what: str) -> Any:
        """One metadata value of type `kind`: a Python scalar or string, a numpy array of numbers, a list of strings."""
        vtype = self._type(kind, what)
        if vtype == GGUFValueType.STRING:
            return self.string(what, C.GGUF_MAX_STRING_BYTES)
        if vtype != GGUFValueType.ARRAY:
            return self.scalar(_SCALARS[vtype], what)
        item = self._type(self.scalar("I", what), what)
        count = self.scalar("Q", what)
        if count > C.GGUF_MAX_ARRAY_LENGTH:
            raise self.fail(
                f"{what} is an array of {count:,} entries, more than the limit of {C.GGUF_MAX_ARRAY_LENGTH:,}"
            )
        if item == GGUFValueType.ARRAY:
            raise self.fail(f"{what} is an array of arrays, which llama.cpp does not read either")
        if item == GGUFValueType.STRING:
            return self.strings(count, what)
        code = _SCALARS[item]
        start = self.take(count * struct.calcsize(code), what)
        return np.frombuffer(self.data, np.dtype(f"<{code}"), count=count, offset=start).copy()

    def _type(self, kind: int, what: str) -> GGUFValueType:
        try:
            return GGUFValueType(kind)
        except ValueError:
            raise self.fail(f"{what} has value type {kind}, which GGUF does not define") from None
