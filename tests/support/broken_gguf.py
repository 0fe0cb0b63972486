"""A corpus of broken model files: every way a download or a converter can go wrong."""

from __future__ import annotations

import random
import struct
from pathlib import Path

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
