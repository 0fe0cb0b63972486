"""A fast reader for a GGUF file's header: metadata keys and tensor infos, no weights.

``gguf``'s ``GGUFReader`` builds a numpy view per array element, so a file with a
150,000-token vocabulary takes over ten seconds to open. This reads the header with
``struct`` from a buffered file: scalars are decoded, numeric arrays are kept as raw bytes
(decoded on demand), and string arrays (the vocabulary, the BPE merges) are skipped by
their lengths, found with numpy in one pass (see :func:`_walk_strings`). An element of a
string array is decoded only when asked for (the BOS/EOS token texts).

The format is the one ``ggml/src/gguf.cpp`` of the vendored llama.cpp reads (versions 2
and 3, little-endian). :func:`read_header` raises :class:`GGUFHeaderError` when the header
cannot be parsed; whether llama.cpp would accept the tensors (types, shapes, offsets) is
left to the caller (:mod:`app.engine.metadata`), which has the tensor infos to check.
"""

from __future__ import annotations

import hashlib
import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, BinaryIO

import numpy as np

GGUF_MAGIC = b"GGUF"
GGUF_DEFAULT_ALIGNMENT = 32
# Limits of ggml/src/gguf.cpp.
GGUF_MAX_STRING_LENGTH = 1024 * 1024 * 1024
GGUF_MAX_ARRAY_ELEMENTS = 1024 * 1024 * 1024
GGML_MAX_DIMS = 4
GGML_MAX_NAME = 64

# gguf_type
T_UINT8, T_INT8, T_UINT16, T_INT16, T_UINT32, T_INT32, T_FLOAT32, T_BOOL = range(8)
T_STRING, T_ARRAY, T_UINT64, T_INT64, T_FLOAT64 = range(8, 13)

_SCALAR: dict[int, struct.Struct] = {
    T_UINT8: struct.Struct("<B"),
    T_INT8: struct.Struct("<b"),
    T_UINT16: struct.Struct("<H"),
    T_INT16: struct.Struct("<h"),
    T_UINT32: struct.Struct("<I"),
    T_INT32: struct.Struct("<i"),
    T_FLOAT32: struct.Struct("<f"),
    T_BOOL: struct.Struct("<b"),
    T_UINT64: struct.Struct("<Q"),
    T_INT64: struct.Struct("<q"),
    T_FLOAT64: struct.Struct("<d"),
}
_NUMPY: dict[int, str] = {
    T_UINT8: "<u1",
    T_INT8: "<i1",
    T_UINT16: "<u2",
    T_INT16: "<i2",
    T_UINT32: "<u4",
    T_INT32: "<i4",
    T_FLOAT32: "<f4",
    T_BOOL: "<i1",
    T_UINT64: "<u8",
    T_INT64: "<i8",
    T_FLOAT64: "<f8",
}
_U32 = struct.Struct("<I")
_I32 = struct.Struct("<i")
_U64 = struct.Struct("<Q")
_I64 = struct.Struct("<q")
_HEADER = struct.Struct("<4sIQQ")

# ggml_type -> (block size, bytes per block), from ggml_blck_size/ggml_type_size of the
# vendored ggml (libggml 0.25.3, llama.cpp 0.5.0-dev, commit 0c1e570). Missing ids are types
# that were removed (4, 5, 31-33, 36-38): gguf.cpp refuses them (block size 0).
GGML_TYPE_SIZES: dict[int, tuple[int, int]] = {
    0: (1, 4),  # F32
    1: (1, 2),  # F16
    2: (32, 18),  # Q4_0
    3: (32, 20),  # Q4_1
    6: (32, 22),  # Q5_0
    7: (32, 24),  # Q5_1
    8: (32, 34),  # Q8_0
    9: (32, 36),  # Q8_1
    10: (256, 84),  # Q2_K
    11: (256, 110),  # Q3_K
    12: (256, 144),  # Q4_K
    13: (256, 176),  # Q5_K
    14: (256, 210),  # Q6_K
    15: (256, 292),  # Q8_K
    16: (256, 66),  # IQ2_XXS
    17: (256, 74),  # IQ2_XS
    18: (256, 98),  # IQ3_XXS
    19: (256, 50),  # IQ1_S
    20: (32, 18),  # IQ4_NL
    21: (256, 110),  # IQ3_S
    22: (256, 82),  # IQ2_S
    23: (256, 136),  # IQ4_XS
    24: (1, 1),  # I8
    25: (1, 2),  # I16
    26: (1, 4),  # I32
    27: (1, 8),  # I64
    28: (1, 8),  # F64
    29: (256, 56),  # IQ1_M
    30: (1, 2),  # BF16
    34: (256, 54),  # TQ1_0
    35: (256, 66),  # TQ2_0
    39: (32, 17),  # MXFP4
    40: (64, 36),  # NVFP4
    41: (128, 18),  # Q1_0
    42: (64, 18),  # Q2_0
}
GGML_TYPE_COUNT = 43


class GGUFHeaderError(Exception):
    """The header cannot be parsed. ``kind`` is "truncated", "version" or "malformed"."""

    def __init__(self, kind: str, detail: str, version: int | None = None) -> None:
        super().__init__(detail)
        self.kind = kind
        self.detail = detail
        self.version = version


class GGUFArray:
    """A metadata array, decoded on demand (``len``, indexing, :meth:`tolist`)."""

    __slots__ = ("_buf", "_lengths", "_offset", "_starts", "count", "type")

    def __init__(
        self,
        type_: int,
        count: int,
        buf: bytes,
        offset: int,
        starts: np.ndarray | None = None,
        lengths: np.ndarray | None = None,
    ) -> None:
        self.type = type_
        self.count = count
        self._buf = buf
        self._offset = offset
        self._starts = starts
        self._lengths = lengths

    def __len__(self) -> int:
        return self.count

    def __repr__(self) -> str:
        return f"GGUFArray(type={self.type}, count={self.count})"

    def raw(self, index: int) -> bytes:
        """The bytes of string element ``index``."""
        if self._starts is None or self._lengths is None:
            raise TypeError("not a string array")
        if not 0 <= index < self.count:
            raise IndexError(index)
        start = int(self._starts[index])
        return self._buf[start : start + int(self._lengths[index])]

    def spans(self) -> tuple[bytes, np.ndarray, np.ndarray]:
        """A string array's buffer with the start offsets and lengths of its elements
        (for checks that look at every element at once)."""
        if self._starts is None or self._lengths is None:
            raise TypeError("not a string array")
        return self._buf, self._starts, self._lengths

    def __getitem__(self, index: int) -> Any:
        if self.type == T_STRING:
            return self.raw(index).decode("utf-8", errors="replace")
        if not 0 <= index < self.count:
            raise IndexError(index)
        fmt = _SCALAR[self.type]
        value = fmt.unpack_from(self._buf, self._offset + index * fmt.size)[0]
        return value != 0 if self.type == T_BOOL else value

    def __iter__(self) -> Iterator[Any]:
        return iter(self.tolist())

    def numpy(self) -> np.ndarray:
        """A numeric array as a numpy array (a copy)."""
        if self.type == T_STRING:
            raise TypeError("a string array has no numpy form")
        dtype = np.dtype(_NUMPY[self.type])
        out = np.frombuffer(self._buf, dtype, self.count, self._offset).copy()
        return out != 0 if self.type == T_BOOL else out

    def tolist(self) -> list[Any]:
        if self.type == T_STRING:
            return [self[i] for i in range(self.count)]
        return list(self.numpy().tolist())


@dataclass(frozen=True)
class TensorInfo:
    """One tensor's entry in the header. ``dims`` are ggml's ``ne`` (fastest first);
    ``offset`` is relative to the data section."""

    name: str
    dims: tuple[int, ...]
    ggml_type: int
    offset: int

    @property
    def n_elements(self) -> int:
        n = 1
        for d in self.dims:
            n *= d
        return n

    @property
    def n_bytes(self) -> int | None:
        """Bytes of data, or None for a type ggml does not know."""
        size = GGML_TYPE_SIZES.get(self.ggml_type)
        if size is None:
            return None
        block, type_size = size
        return self.n_elements // block * type_size


@dataclass(frozen=True)
class GGUFHeader:
    """What :func:`read_header` found. ``fields`` maps keys to Python scalars (str, int,
    float, bool) or :class:`GGUFArray`; ``types`` maps keys to their gguf_type."""

    version: int
    fields: dict[str, Any]
    types: dict[str, int]
    tensors: tuple[TensorInfo, ...]
    alignment: int
    data_offset: int  # file offset of the data section (aligned end of the header)
    file_size: int
    # The header's bytes (at least up to ``header_end``, the end of the last tensor info),
    # kept for :meth:`digest`; the arrays above are views into them anyway.
    raw: bytes = field(default=b"", repr=False, compare=False)
    header_end: int = 0

    def get(self, key: str, default: Any = None) -> Any:
        return self.fields.get(key, default)

    def digest(self) -> str:
        """A hash of everything llama.cpp reads before the weights: the header's bytes
        (metadata and tensor infos) and the file's size (the tensors' data must fit in
        it). Two files with the same digest load, or fail, the same way up to the weights."""
        # SHA-256: the CPU's SHA instructions hash a 6 MB header (a 150k vocabulary) in
        # ~3 ms, under half of blake2b's time.
        h = hashlib.sha256(self.file_size.to_bytes(8, "little"))
        h.update(memoryview(self.raw)[: self.header_end])
        return h.hexdigest()[:32]


class _Source:
    """The file's first bytes, read on demand in growing chunks (no mmap: a file that
    shrinks while mapped would kill the process with SIGBUS)."""

    def __init__(self, fh: BinaryIO, size: int) -> None:
        self.fh = fh
        self.size = size
        self.buf = b""

    def ensure(self, end: int) -> bytes:
        if end > len(self.buf):
            if end > self.size:
                raise GGUFHeaderError("truncated", "the header runs past the end of the file")
            want = min(self.size, max(end, 2 * len(self.buf), 1 << 18))
            self.fh.seek(len(self.buf))
            chunk = self.fh.read(want - len(self.buf))
            if len(chunk) != want - len(self.buf):
                raise GGUFHeaderError("truncated", "the file ended while reading its header")
            self.buf = self.buf + chunk
        return self.buf


# The last header parsed. A model load reads its file's header several times (its
# metadata, the load check's key, the CPU guard's plan, the offload plan): walking a large
# vocabulary each time cost a resumed chat's start tens of milliseconds.
_last: GGUFHeader | None = None


def read_header(path: str | os.PathLike[str]) -> GGUFHeader:
    """Parse the header of the GGUF file at ``path`` (raises :class:`GGUFHeaderError`,
    or ``OSError`` when the file cannot be read)."""
    global _last
    with open(path, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        last = _last
        # The same bytes give the same header: compared, not trusted to a name or a time
        # (a file rewritten in place within one clock tick keeps its size and mtime).
        if last is not None and last.file_size == size and len(last.raw) >= last.header_end > 0:
            if fh.read(len(last.raw)) == last.raw:
                return last
            fh.seek(0)
        header = _parse(_Source(fh, size))
    _last = header
    return header


def _parse(src: _Source) -> GGUFHeader:
    buf = src.ensure(min(src.size, 24))
    if len(buf) < 4 or buf[:4] != GGUF_MAGIC:
        raise GGUFHeaderError("malformed", "the file does not start with 'GGUF'")
    if len(buf) < 8:
        raise GGUFHeaderError("truncated", "the file ends after its first bytes")
    version = _U32.unpack_from(buf, 4)[0]
    if version & 0xFFFF == 0 and version != 0:
        raise GGUFHeaderError("version", "big-endian file", version)
    if version not in (2, 3):
        raise GGUFHeaderError("version", f"unsupported version {version}", version)
    buf = src.ensure(24)
    _, _, n_tensors, n_kv = _HEADER.unpack_from(buf, 0)
    # Every KV pair needs at least 13 bytes, every tensor info 24: counts that cannot fit
    # in the file are damage (gguf.cpp refuses counts near 2**64 for the same reason).
    if n_kv * 13 > src.size or n_tensors * 24 > src.size:
        raise GGUFHeaderError("truncated", "its counts of keys or tensors exceed the file size")

    pos = 24
    fields: dict[str, Any] = {}
    types: dict[str, int] = {}
    for i in range(n_kv):
        key_bytes, pos = _string(src, pos)
        key = key_bytes.decode("utf-8", errors="replace")
        if not key:
            raise GGUFHeaderError("malformed", f"key {i} is empty")
        if key in fields:
            raise GGUFHeaderError("malformed", f"the key '{printable_name(key)}' appears twice")
        buf = src.ensure(pos + 4)
        vtype = _I32.unpack_from(buf, pos)[0]
        pos += 4
        value: Any
        if vtype == T_ARRAY:
            buf = src.ensure(pos + 12)
            etype = _I32.unpack_from(buf, pos)[0]
            count = _U64.unpack_from(buf, pos + 4)[0]
            pos += 12
            if etype not in _SCALAR and etype != T_STRING:
                raise GGUFHeaderError(
                    "malformed", f"the key '{printable_name(key)}' has an invalid type"
                )
            if count > GGUF_MAX_ARRAY_ELEMENTS:
                raise GGUFHeaderError("malformed", f"the array '{printable_name(key)}' is too long")
            value, pos = _array(src, pos, etype, count)
        elif vtype == T_STRING:
            raw, pos = _string(src, pos)
            value = raw.decode("utf-8", errors="replace")
        elif vtype in _SCALAR:
            fmt = _SCALAR[vtype]
            buf = src.ensure(pos + fmt.size)
            value = fmt.unpack_from(buf, pos)[0]
            if vtype == T_BOOL:
                value = value != 0
            pos += fmt.size
        else:
            raise GGUFHeaderError(
                "malformed", f"the key '{printable_name(key)}' has an invalid type {vtype}"
            )
        fields[key] = value
        types[key] = vtype

    alignment = GGUF_DEFAULT_ALIGNMENT
    if "general.alignment" in fields:
        value = fields["general.alignment"]
        if types["general.alignment"] != T_UINT32:
            raise GGUFHeaderError("malformed", "general.alignment is not a 32-bit unsigned number")
        if value == 0 or value & (value - 1):
            raise GGUFHeaderError("malformed", f"its alignment {value} is not a power of two")
        alignment = int(value)

    tensors: list[TensorInfo] = []
    u32, u64, i64, i32 = _U32.unpack_from, _U64.unpack_from, _I64.unpack_from, _I32.unpack_from
    for _ in range(n_tensors):
        name_bytes, pos = _string(src, pos)
        buf = src.ensure(pos + 4)
        n_dims = u32(buf, pos)[0]
        pos += 4
        if n_dims > GGML_MAX_DIMS:
            raise GGUFHeaderError(
                "malformed",
                f"the tensor '{printable_name(name_bytes.decode('utf-8', 'replace'))}' has {n_dims} "
                "dimensions",
            )
        buf = src.ensure(pos + 8 * n_dims + 12)
        dims = tuple(i64(buf, pos + 8 * j)[0] for j in range(n_dims))
        pos += 8 * n_dims
        ggml_type = i32(buf, pos)[0]
        offset = u64(buf, pos + 4)[0]
        pos += 12
        tensors.append(
            TensorInfo(name_bytes.decode("utf-8", errors="replace"), dims, ggml_type, offset)
        )
    data_offset = pos + (-pos % alignment) if tensors else pos
    return GGUFHeader(
        version=version,
        fields=fields,
        types=types,
        tensors=tuple(tensors),
        alignment=alignment,
        data_offset=data_offset,
        file_size=src.size,
        raw=src.buf,
        header_end=pos,
    )


def printable_name(name: str, limit: int = 48) -> str:
    """A key or tensor name as a sentence can quote it: a damaged one holds control
    characters and runs on into the next field."""
    clean = "".join(c if c.isprintable() else "?" for c in name)
    return clean if len(clean) <= limit else clean[: limit - 1] + "…"


def _string(src: _Source, pos: int) -> tuple[bytes, int]:
    buf = src.ensure(pos + 8)
    n = _U64.unpack_from(buf, pos)[0]
    if n > GGUF_MAX_STRING_LENGTH:
        raise GGUFHeaderError("malformed", "a string is longer than 1 GiB")
    end = pos + 8 + n
    buf = src.ensure(end)
    return buf[pos + 8 : end], end


def _array(src: _Source, pos: int, etype: int, count: int) -> tuple[GGUFArray, int]:
    if etype != T_STRING:
        end = pos + count * _SCALAR[etype].size
        buf = src.ensure(end)
        return GGUFArray(etype, count, buf, pos), end
    starts, lengths, end = _walk_strings(src, pos, count)
    return GGUFArray(T_STRING, count, src.buf, pos, starts, lengths), end


# -- skipping string arrays ---------------------------------------------------------------

# Below this many elements a plain loop is faster than numpy's set-up.
_SMALL_ARRAY = 64
# Guess of the bytes per element (8-byte length + text) for the first window.
_GUESS_BYTES = 24


def _walk_strings(src: _Source, pos: int, count: int) -> tuple[np.ndarray, np.ndarray, int]:
    """Start offsets and lengths of ``count`` length-prefixed strings at ``pos``, and the
    offset after the last one.

    Each element is a u64 length then the bytes. A plain loop costs ~0.3 us per element;
    this finds the elements of a whole window at once instead: when no string is empty or
    holds a zero byte (true of byte-level BPE and SentencePiece vocabularies), the last
    zero byte of every run of zeros is the top byte of a length, so the run ends give the
    candidate starts. The candidates are then checked as a chain (each start plus 8 plus
    its length is the next start), which proves them right; where the chain breaks (an
    empty string, a zero byte), one element is read with the plain loop and the search
    goes on after it.
    """
    starts: list[np.ndarray] = []
    lengths: list[np.ndarray] = []
    remaining = count
    guess = _GUESS_BYTES
    slow_run = 0
    while remaining:
        if remaining <= _SMALL_ARRAY or slow_run:
            n = min(remaining, slow_run or remaining)
            s, n_len, pos = _walk_slow(src, pos, n)
            slow_run = 0
        else:
            s, n_len, pos, complete = _walk_fast(src, pos, remaining, guess)
            if not complete:
                guess *= 2  # the window ended before the array: look further next time
            if len(s) < 256 and remaining > len(s):
                # Irregular data (many empty strings or zero bytes): walk a stretch slowly.
                slow_run = min(remaining - len(s), 4096)
        starts.append(s)
        lengths.append(n_len)
        remaining -= len(s)
    if not starts:
        return np.empty(0, np.int64), np.empty(0, np.int64), pos
    if len(starts) == 1:
        return starts[0], lengths[0], pos
    return np.concatenate(starts), np.concatenate(lengths), pos


def _walk_slow(src: _Source, pos: int, n: int) -> tuple[np.ndarray, np.ndarray, int]:
    starts = np.empty(n, np.int64)
    lengths = np.empty(n, np.int64)
    unpack = _U64.unpack_from
    size = src.size
    for i in range(n):
        buf = src.ensure(pos + 8)
        length = unpack(buf, pos)[0]
        if length > GGUF_MAX_STRING_LENGTH or pos + 8 + length > size:
            raise GGUFHeaderError("truncated", "a string runs past the end of the file")
        starts[i] = pos + 8
        lengths[i] = length
        pos += 8 + length
    return starts, lengths, pos


def _walk_fast(
    src: _Source, pos: int, remaining: int, guess: int
) -> tuple[np.ndarray, np.ndarray, int, bool]:
    """Elements found from ``pos`` in one window; ``complete`` is False when the window
    ended before ``remaining`` elements (the caller retries with a bigger guess)."""
    end = min(src.size, pos + remaining * guess)
    if end - pos < 16:
        s, n, p = _walk_slow(src, pos, 1)
        return s, n, p, True
    buf = src.ensure(end)
    window = np.frombuffer(buf, np.uint8, end - pos, pos)
    zero = window == 0
    # Index of the last zero of each run of zeros, minus 7: where a length starts.
    cand = np.flatnonzero(zero[:-1] & ~zero[1:]) - 7
    cand = cand[(cand >= 0) & (cand + 8 <= end - pos)]
    if not len(cand) or cand[0] != 0:
        s, n, p = _walk_slow(src, pos, 1)
        return s, n, p, True
    cand = cand[:remaining]
    as_u64 = np.ndarray((end - pos - 7,), np.dtype("<u8"), buf, pos, (1,))
    lens = as_u64[cand]
    ok = lens <= GGUF_MAX_STRING_LENGTH
    nxt = cand + 8 + np.where(ok, lens, 0).astype(np.int64)
    chained = ok[:-1] & (nxt[:-1] == cand[1:])
    bad = np.flatnonzero(~chained)
    k = int(bad[0]) + 1 if len(bad) else len(cand)  # elements 0..k-1 are proven
    # The last proven element must be valid and end inside the file.
    last_ok = bool(ok[k - 1]) and int(nxt[k - 1]) + pos <= src.size
    if not last_ok:
        k -= 1
        if k == 0:
            s, n, p = _walk_slow(src, pos, 1)
            return s, n, p, True
    new_pos = int(nxt[k - 1]) + pos
    if new_pos > end:  # the last string reaches beyond the window: read it next time
        k -= 1
        if k == 0:
            s, n, p = _walk_slow(src, pos, 1)
            return s, n, p, True
        new_pos = int(nxt[k - 1]) + pos
    # A chain that broke well inside the window was irregular data; one that broke at its
    # end ran out of window (then the caller looks further next time).
    complete = k == remaining or new_pos < end - 64
    return (
        cand[:k] + (pos + 8),
        lens[:k].astype(np.int64),
        new_pos,
        complete,
    )
