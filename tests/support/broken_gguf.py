"""A corpus of broken model files: every way a download or a converter can go wrong."""

from __future__ import annotations

import random
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.engine.header_checks import LLAMA_MAX_LAYERS
from tests.support.gguf_models import TinySpec, write_tiny_model


def write_corpus(folder: Path) -> dict[str, Path]:
    """Write the broken files into ``folder``; returns name -> path (some paths do not exist)."""
    folder.mkdir(parents=True, exist_ok=True)
    good = write_tiny_model(folder / "_good.gguf", TinySpec(seed=5))
    data = good.read_bytes()
    rng = random.Random(0)
    files: dict[str, Path] = {}

    def put(name: str, content: bytes) -> None:
        path = folder / f"{name}.gguf"
        path.write_bytes(content)
        files[name] = path

    files["missing"] = folder / "does-not-exist.gguf"
    (folder / "a-folder.gguf").mkdir(exist_ok=True)
    files["directory"] = folder / "a-folder.gguf"
    put("empty", b"")
    put("random", bytes(rng.getrandbits(8) for _ in range(4096)))
    put("random_with_magic", b"GGUF" + bytes(rng.getrandbits(8) for _ in range(4096)))
    put("text", b"this is not a model, it is a README\n" * 20)
    put("magic_only", b"GGUF")
    put("truncated_header", data[:200])
    put("truncated_half", data[: len(data) // 2])
    put("truncated_last_byte", data[:-1])
    put("bad_version", data[:4] + struct.pack("<I", 99) + data[8:])
    put("huge_tensor_count", data[:8] + struct.pack("<Q", 2**62) + data[16:])
    put("huge_kv_count", data[:16] + struct.pack("<Q", 2**62) + data[24:])
    put("unknown_architecture", _arch(data, b"xllma"))
    # Tensor infos llama.cpp refuses (output.weight is the last tensor: its data can move
    # without moving the others').
    put("zero_dimension", _patch_tensor(data, "output.weight", dims=(64, 0)))
    put("huge_dimension", _patch_tensor(data, "output.weight", dims=(64, 2**62)))
    put("misaligned_offset", _patch_tensor(data, "output.weight", offset_delta=4))
    put("offset_past_end", _patch_tensor(data, "output.weight", offset_delta=1 << 24))
    vocab_only = write_tiny_model(folder / "vocab_only.gguf", TinySpec(vocab_only=True))
    files["vocab_only"] = vocab_only
    missing = write_tiny_model(folder / "missing_tensor.gguf", TinySpec(n_layer=2))
    files["missing_tensor"] = _drop_layer_count(missing)
    return files


def _arch(data: bytes, new: bytes) -> bytes:
    # general.architecture is the first string value: b"general.architecture" + type + len + "llama"
    key = b"general.architecture"
    index = data.index(key) + len(key) + 4 + 8
    assert data[index : index + 5] == b"llama"
    return data[:index] + new + data[index + 5 :]


def _drop_layer_count(path: Path) -> Path:
    """Claim one more layer than the file has: llama.cpp finds a tensor missing."""
    data = path.read_bytes()
    key = b"llama.block_count"
    index = data.index(key) + len(key) + 4  # key, then the u32 value type
    count = struct.unpack_from("<I", data, index)[0]
    path.write_bytes(data[:index] + struct.pack("<I", count + 1) + data[index + 4 :])
    return path


def _patch_tensor(
    data: bytes, name: str, *, dims: tuple[int, ...] | None = None, offset_delta: int = 0
) -> bytes:
    """Change one tensor info: its dimensions (same count) or its data offset."""
    raw = name.encode()
    index = data.index(struct.pack("<Q", len(raw)) + raw) + 8 + len(raw)
    n_dims = struct.unpack_from("<I", data, index)[0]
    out = bytearray(data)
    if dims is not None:
        assert len(dims) == n_dims
        struct.pack_into(f"<{n_dims}q", out, index + 4, *dims)
    at = index + 4 + 8 * n_dims + 4
    struct.pack_into("<Q", out, at, struct.unpack_from("<Q", data, at)[0] + offset_delta)
    return bytes(out)


# -- header mutants -----------------------------------------------------------------------
#
# A mutant changes only the header (metadata and tensor infos): the weights stay as they
# were. Random ones zero, flip or set to 0xFF a few bytes; targeted ones re-encode one field
# the way a converter bug or a bad download would leave it (two equal token strings, arrays
# shorter than the vocabulary, counts that do not match, impossible lengths and offsets).

_SCALAR_SIZE = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
T_UINT32, T_INT32, T_FLOAT32, T_STRING, T_ARRAY = 4, 5, 6, 8, 9


@dataclass
class Header:
    """A GGUF file split into its parts; :meth:`encode` writes it back (re-aligned)."""

    version: int
    kvs: list[list[Any]]  # [key, value type, value bytes (everything after the type)]
    tensors: list[list[Any]]  # [name, dims, ggml type, offset]
    data: bytes  # the data section, from its aligned start
    header_end: int  # where the tensor infos end in the original file
    alignment: int = 32

    def get(self, key: str) -> list[Any]:
        return next(kv for kv in self.kvs if kv[0] == key)

    def set(self, key: str, vtype: int, payload: bytes) -> Header:
        entry = next((kv for kv in self.kvs if kv[0] == key), None)
        if entry is None:
            self.kvs.append([key, vtype, payload])
        else:
            entry[1], entry[2] = vtype, payload
        return self

    def drop(self, key: str) -> Header:
        self.kvs = [kv for kv in self.kvs if kv[0] != key]
        return self

    def encode(self, *, n_tensors: int | None = None, n_kv: int | None = None) -> bytes:
        out = bytearray(b"GGUF")
        out += struct.pack(
            "<IQQ", self.version, _or(n_tensors, len(self.tensors)), _or(n_kv, len(self.kvs))
        )
        for key, vtype, payload in self.kvs:
            out += _str(key.encode()) + struct.pack("<i", vtype) + payload
        for name, dims, ggml_type, offset in self.tensors:
            out += _str(name.encode()) + struct.pack("<I", len(dims))
            out += struct.pack(f"<{len(dims)}q", *dims) + struct.pack("<iQ", ggml_type, offset)
        out += bytes(-len(out) % self.alignment)
        return bytes(out) + self.data


def _or(value: int | None, default: int) -> int:
    return default if value is None else value


def _str(raw: bytes) -> bytes:
    return struct.pack("<Q", len(raw)) + raw


def string_value(text: str) -> bytes:
    return _str(text.encode())


def u32_value(n: int) -> bytes:
    return struct.pack("<I", n)


def string_array(items: list[bytes]) -> bytes:
    return struct.pack("<iQ", T_STRING, len(items)) + b"".join(_str(i) for i in items)


def number_array(etype: int, values: list[Any], *, count: int | None = None) -> bytes:
    fmt = {T_UINT32: "I", T_INT32: "i", T_FLOAT32: "f"}[etype]
    return struct.pack("<iQ", etype, _or(count, len(values))) + struct.pack(
        f"<{len(values)}{fmt}", *values
    )


def parse(data: bytes) -> Header:
    """Split a well-formed GGUF file (the files the tests write) into a :class:`Header`."""
    version, n_tensors, n_kv = struct.unpack_from("<IQQ", data, 4)
    pos = 24

    def string() -> bytes:
        nonlocal pos
        (n,) = struct.unpack_from("<Q", data, pos)
        pos += 8 + n
        return data[pos - n : pos]

    def skip_value(vtype: int) -> None:
        nonlocal pos
        if vtype == T_STRING:
            string()
        elif vtype == T_ARRAY:
            etype, count = struct.unpack_from("<iQ", data, pos)
            pos += 12
            if etype == T_STRING:
                for _ in range(count):
                    string()
            else:
                pos += count * _SCALAR_SIZE[etype]
        else:
            pos += _SCALAR_SIZE[vtype]

    kvs: list[list[Any]] = []
    alignment = 32
    for _ in range(n_kv):
        key = string().decode()
        (vtype,) = struct.unpack_from("<i", data, pos)
        pos += 4
        start = pos
        skip_value(vtype)
        kvs.append([key, vtype, data[start:pos]])
        if key == "general.alignment":
            alignment = struct.unpack_from("<I", data, start)[0]
    tensors: list[list[Any]] = []
    for _ in range(n_tensors):
        name = string().decode()
        (n_dims,) = struct.unpack_from("<I", data, pos)
        dims = list(struct.unpack_from(f"<{n_dims}q", data, pos + 4))
        ggml_type, offset = struct.unpack_from("<iQ", data, pos + 4 + 8 * n_dims)
        pos += 4 + 8 * n_dims + 12
        tensors.append([name, dims, ggml_type, offset])
    header_end = pos
    start = pos + (-pos % alignment)
    return Header(version, kvs, tensors, data[start:], header_end, alignment)


def token_list(header: Header) -> list[bytes]:
    payload = header.get("tokenizer.ggml.tokens")[2]
    (count,) = struct.unpack_from("<Q", payload, 4)
    pos, items = 12, []
    for _ in range(count):
        (n,) = struct.unpack_from("<Q", payload, pos)
        items.append(payload[pos + 8 : pos + 8 + n])
        pos += 8 + n
    return items


def _numbers(header: Header, key: str) -> tuple[int, list[Any]]:
    payload = header.get(key)[2]
    etype, count = struct.unpack_from("<iQ", payload, 0)
    fmt = {T_UINT32: "I", T_INT32: "i", T_FLOAT32: "f"}[etype]
    return etype, list(struct.unpack_from(f"<{count}{fmt}", payload, 12))


@dataclass(frozen=True)
class Mutant:
    name: str
    path: Path
    expect: str | None = None  # a phrase the refusal must hold; None: loads or refuses


def write_targeted_mutants(
    folder: Path, base: Path, prefix: str, only: set[str] | None = None
) -> list[Mutant]:
    """Damage to one field at a time of ``base`` (a model the tests write); ``only`` keeps
    the mutants of those names (without the prefix)."""
    folder.mkdir(parents=True, exist_ok=True)
    parsed = parse(base.read_bytes())
    out: list[Mutant] = []

    def put(name: str, content: bytes, expect: str | None) -> None:
        if only is not None and name not in only:
            return
        path = folder / f"{prefix}-{name}.gguf"
        path.write_bytes(content)
        out.append(Mutant(f"{prefix}-{name}", path, expect))

    def edited() -> Header:  # a fresh copy of the parsed file to damage
        return Header(
            parsed.version,
            [list(kv) for kv in parsed.kvs],
            [[n, list(d), t, o] for n, d, t, o in parsed.tensors],
            parsed.data,
            parsed.header_end,
            parsed.alignment,
        )

    h = edited()
    tokens = token_list(h)
    arch = h.get("general.architecture")[2][8:].decode()
    n_layer = struct.unpack_from("<I", h.get(f"{arch}.block_count")[2])[0]
    model = h.get("tokenizer.ggml.model")[2][8:].decode()
    # Two token strings made equal: directly, through a zero byte (llama.cpp reads C
    # strings) and through an empty token (renamed "[EMPTY_<id>]").
    same = list(tokens)
    same[-2] = same[-1]
    put(
        "duplicate-token",
        h.set("tokenizer.ggml.tokens", T_ARRAY, string_array(same)).encode(),
        "are the same string",
    )
    h, zeroed = edited(), list(tokens)
    zeroed[-1] = zeroed[-2] + b"\0tail"
    put(
        "duplicate-after-zero-byte",
        h.set("tokenizer.ggml.tokens", T_ARRAY, string_array(zeroed)).encode(),
        "are the same string",
    )
    h, empty = edited(), list(tokens)
    empty[-2], empty[-1] = b"", b"[EMPTY_%d]" % (len(tokens) - 2)
    put(
        "duplicate-empty-token",
        h.set("tokenizer.ggml.tokens", T_ARRAY, string_array(empty)).encode(),
        "are the same string",
    )
    h, blank = edited(), list(tokens)
    blank[-1] = b"\0" + blank[-1]
    put(
        "token-starts-with-zero",
        h.set("tokenizer.ggml.tokens", T_ARRAY, string_array(blank)).encode(),
        None,
    )
    # Arrays that do not match the vocabulary.
    for key, what in (
        ("tokenizer.ggml.scores", "token scores"),
        ("tokenizer.ggml.token_type", "token types"),
    ):
        if any(kv[0] == key for kv in h.kvs):
            h = edited()
            etype, values = _numbers(h, key)
            put(
                f"short-{key.rsplit('.', 1)[1]}",
                h.set(key, T_ARRAY, number_array(etype, values[:-1])).encode(),
                what,
            )
            h = edited()
            put(
                f"mistyped-{key.rsplit('.', 1)[1]}",
                h.set(key, T_ARRAY, string_array([b"x"] * len(tokens))).encode(),
                what,
            )
    h = edited()
    put(
        "tokens-not-strings",
        h.set(
            "tokenizer.ggml.tokens", T_ARRAY, number_array(T_INT32, list(range(len(tokens))))
        ).encode(),
        "not a list of strings",
    )
    h = edited()
    put("tokens-empty", h.set("tokenizer.ggml.tokens", T_ARRAY, string_array([])).encode(), None)
    h = edited()
    put(
        "unknown-tokenizer",
        h.set("tokenizer.ggml.model", T_STRING, string_value("llamx")).encode(),
        "tokenizer 'llamx'",
    )
    h = edited()
    put(
        "no-tokenizer-model",
        h.drop("tokenizer.ggml.model").encode(),
        "tokenizer.ggml.model is missing",
    )
    if model == "gpt2":
        h = edited()
        put("merges-missing", h.drop("tokenizer.ggml.merges").encode(), "merges")
        h = edited()
        put(
            "merges-mistyped",
            h.set("tokenizer.ggml.merges", T_ARRAY, number_array(T_INT32, [1, 2])).encode(),
            "merges",
        )
    if model == "llama":
        # A WordPiece vocabulary cannot hold byte tokens (llama.cpp aborts in token_to_byte).
        h = edited()
        put(
            "bert-with-byte-tokens",
            h.set("tokenizer.ggml.model", T_STRING, string_value("bert")).encode(),
            "byte token",
        )
    h = edited()
    put(
        "bos-out-of-range",
        h.set("tokenizer.ggml.bos_token_id", T_UINT32, u32_value(10**6)).encode(),
        None,
    )
    # Hyper-parameters load_hparams asserts on.
    for n, expect in ((0, "layers"), (LLAMA_MAX_LAYERS + 1, "layers"), (2**31, "layers")):
        h = edited()
        put(
            f"block-count-{n}",
            h.set(f"{arch}.block_count", T_UINT32, u32_value(n)).encode(),
            expect,
        )
    h = edited()
    put(
        "block-count-plus-one",
        h.set(f"{arch}.block_count", T_UINT32, u32_value(n_layer + 1)).encode(),
        "is missing",
    )
    h = edited()
    put(
        "head-count-array-too-short",
        h.set(
            f"{arch}.attention.head_count", T_ARRAY, number_array(T_UINT32, [4] * (n_layer - 1))
        ).encode(),
        "value(s) for",
    )
    h = edited()
    put(
        "nextn-layers",
        h.set(f"{arch}.nextn_predict_layers", T_UINT32, u32_value(n_layer + 1)).encode(),
        "prediction layers",
    )
    h = edited()
    put(
        "expert-count-huge",
        h.set(f"{arch}.expert_count", T_UINT32, u32_value(5000)).encode(),
        "experts",
    )
    h = edited()
    put(
        "experts-used-without-experts",
        h.drop(f"{arch}.expert_count")
        .set(f"{arch}.expert_used_count", T_UINT32, u32_value(2))
        .encode(),
        "expert counts",
    )
    h = edited()
    put(
        "rope-scaling-unknown",
        h.set(f"{arch}.rope.scaling.type", T_STRING, string_value("warp")).encode(),
        "rope scaling",
    )
    # Counts and lengths against the file.
    h = edited()
    put("tensor-count-plus-one", h.encode(n_tensors=len(h.tensors) + 1), None)
    h = edited()
    put("tensor-count-minus-one", h.encode(n_tensors=len(h.tensors) - 1), None)
    h = edited()
    put("kv-count-plus-one", h.encode(n_kv=len(h.kvs) + 1), None)
    h = edited()
    put("kv-count-minus-one", h.encode(n_kv=len(h.kvs) - 1), None)
    h = edited()
    h.get("tokenizer.ggml.tokens")[2] = (
        struct.pack("<iQ", T_STRING, 2**40) + h.get("tokenizer.ggml.tokens")[2][12:]
    )
    put("token-count-huge", h.encode(), "damaged")
    h = edited()
    h.get("general.architecture")[2] = (
        struct.pack("<Q", 2**40) + h.get("general.architecture")[2][8:]
    )
    put("string-length-huge", h.encode(), "damaged")
    h = edited()
    h.tensors[0][3] = len(h.data) + (1 << 20)
    put("first-tensor-offset-past-end", h.encode(), "damaged")
    h = edited()
    h.tensors[-1][3] = 2**64 - 32
    put("tensor-offset-wraps", h.encode(), "damaged")
    h = edited()
    h.tensors[1][0] = h.tensors[0][0]
    put("tensor-name-twice", h.encode(), "appears twice")
    h = edited()
    h.tensors[0][2] = 99
    put("tensor-type-unknown", h.encode(), "type")
    h = edited()
    h.tensors[0][1] = [*h.tensors[0][1], 1, 1, 1]
    put("tensor-five-dims", h.encode(), "dimensions")
    return out


def header_region(data: bytes) -> int:
    """Where the tensor infos end: random mutants stay before it (the weights are not the
    header's)."""
    return parse(data).header_end


def write_random_mutants(
    folder: Path, base: Path, prefix: str, count: int, seed: int
) -> list[Mutant]:
    """``count`` seeded mutants of ``base``: 1-8 bytes zeroed, flipped or set to 0xFF at
    a place in its header (half of them in the first 2 KiB, where the counts, keys and
    hyper-parameters are, the rest anywhere up to the end of the tensor infos)."""
    folder.mkdir(parents=True, exist_ok=True)
    data = base.read_bytes()
    end = header_region(data)
    rng = random.Random(seed)
    out: list[Mutant] = []
    for i in range(count):
        where = rng.randrange(4, min(end, 2048)) if i % 2 == 0 else rng.randrange(4, end)
        width = rng.choice((1, 1, 1, 2, 4, 8))
        op = rng.choice(("zero", "flip", "ff"))
        buf = bytearray(data)
        for j in range(where, min(where + width, end)):
            if op == "zero":
                buf[j] = 0
            elif op == "ff":
                buf[j] = 0xFF
            else:
                buf[j] ^= 1 << rng.randrange(8)
        name = f"{prefix}-random{i:03d}-{op}{width}@{where}"
        path = folder / f"{name}.gguf"
        path.write_bytes(bytes(buf))
        out.append(Mutant(name, path))
    return out


# -- the sweep ----------------------------------------------------------------------------


def sweep(paths: list[Path]) -> None:
    """Open each file through the app's load path (the engine: header checks, the load
    check, llama.cpp's load, a context) and print what happened, one line per step.

    The tests run this in a child process: if a load still kills the process, the last
    ``BEGIN`` line names the file that did.
    """
    import json
    import traceback

    from app.engine import Engine, EngineError
    from app.engine.settings import ContextSettings

    for path in paths:
        print("BEGIN", path.name, flush=True)
        try:
            with Engine.open(path, ContextSettings(n_ctx=256, n_batch=64, n_ubatch=64)) as engine:
                engine.detokenize(engine.tokenize("Hello world, 日本 🦙\n"))
        except EngineError as exc:
            print("REFUSED", path.name, json.dumps(str(exc)), flush=True)
        except Exception:
            print("ERROR", path.name, json.dumps(traceback.format_exc()), flush=True)
        else:
            print("LOADED", path.name, flush=True)


if __name__ == "__main__":
    import sys

    sweep([Path(p) for p in sys.argv[1:]])
