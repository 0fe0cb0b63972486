"""Our envelope around llama.cpp's per-sequence state blob.

llama.cpp restores a blob with flipped bytes without complaint (and then generates from a
poisoned cache), and accepts a blob from another model of the same shape. So every blob is
wrapped with what it needs to be trusted, and checked before llama.cpp sees it:

    magic (8) | format version (u32) | header length (u32) | header hash (16) | header JSON
    | blob | checkpoint blobs and logits (version 2)

The header holds the model fingerprint, the cache-layout settings, the token list the cells
hold, the tokens still to process, the blob's size and hash, and the position and sizes of
each checkpoint (:mod:`app.engine.checkpoints`), whose bytes share one hash.
"""

from __future__ import annotations

import hashlib
import json
import struct
from dataclasses import dataclass, field
from typing import Any

from app.engine.checkpoints import Checkpoint
from app.engine.errors import StateError

MAGIC = b"LDKVSEQ\x00"
VERSION = 2
READABLE_VERSIONS = (1, 2)  # version 1 had no checkpoints
_FIXED = struct.Struct("<8sII16s")


def _digest(data: bytes | memoryview) -> bytes:
    return hashlib.blake2b(data, digest_size=16).digest()


@dataclass
class SequenceState:
    """A sequence's cache, with everything needed to check it before restoring."""

    model_fingerprint: str
    layout: dict[str, Any]
    tokens: list[int]
    blob: bytes
    pending: list[int] = field(default_factory=list)
    n_keep: int = 0
    extra: dict[str, Any] = field(default_factory=dict)
    checkpoints: list[Checkpoint] = field(default_factory=list)

    def to_bytes(self) -> bytes:
        tail = b"".join(c.blob + (c.logits or b"") for c in self.checkpoints)
        header = {
            "model_fingerprint": self.model_fingerprint,
            "layout": self.layout,
            "tokens": self.tokens,
            "pending": self.pending,
            "n_keep": self.n_keep,
            "blob_size": len(self.blob),
            "blob_hash": _digest(self.blob).hex(),
            "extra": self.extra,
            "checkpoints": [
                [c.n_tokens, len(c.blob), len(c.logits or b"")] for c in self.checkpoints
            ],
            "checkpoints_hash": _digest(tail).hex(),
        }
        raw = json.dumps(header, separators=(",", ":"), sort_keys=True).encode("utf-8")
        return _FIXED.pack(MAGIC, VERSION, len(raw), _digest(raw)) + raw + self.blob + tail

    @classmethod
    def from_bytes(cls, data: bytes) -> SequenceState:
        """Parse and verify; raises :class:`StateError` naming what is wrong."""
        view = memoryview(data)
        if len(view) < _FIXED.size:
            raise StateError("The saved state is truncated (shorter than its header).")
        magic, version, header_len, header_hash = _FIXED.unpack_from(view)
        if magic != MAGIC:
            raise StateError("The file is not a LlamaDesk sequence state.")
        if version not in READABLE_VERSIONS:
            raise StateError(
                f"The saved state has format version {version}; this LlamaDesk reads version {VERSION}."
            )
        start = _FIXED.size
        if len(view) < start + header_len:
            raise StateError("The saved state is truncated (its header is incomplete).")
        raw = bytes(view[start : start + header_len])
        if _digest(raw) != header_hash:
            raise StateError("The saved state's header is damaged (checksum mismatch).")
        try:
            header = json.loads(raw)
            # the rest stays a view: the cache data (tens of MB) is copied once, after
            # its checksum held (a resumed chat's start waits on every copy)
            return cls._from_header(header, view[start + header_len :])
        except StateError:
            raise
        except (ValueError, TypeError, KeyError, AttributeError, RecursionError) as exc:
            raise StateError("The saved state's header cannot be read.") from exc

    @classmethod
    def _from_header(cls, header: Any, rest: memoryview) -> SequenceState:
        if not isinstance(header, dict):
            raise StateError("The saved state's header cannot be read.")
        size = header.get("blob_size")
        if not isinstance(size, int) or size < 0:
            raise StateError("The saved state's header cannot be read (no cache size).")
        if len(rest) < size:
            raise StateError(
                f"The saved state is truncated: {len(rest):,} of {size:,} bytes of cache data."
            )
        checkpoints = _checkpoints(header, rest[size:])
        if _digest(rest[:size]).hex() != header.get("blob_hash"):
            raise StateError("The saved cache data is damaged (checksum mismatch).")
        blob = bytes(rest[:size])
        tokens, pending = header.get("tokens"), header.get("pending", [])
        if not (
            isinstance(tokens, list)
            and isinstance(pending, list)
            and all(type(t) is int and t >= 0 for t in tokens)
            and all(type(t) is int and t >= 0 for t in pending)
        ):
            raise StateError("The saved state's token list is invalid.")
        n_keep, layout, extra = (
            header.get("n_keep", 0),
            header.get("layout") or {},
            header.get("extra") or {},
        )
        if type(n_keep) is not int or not 0 <= n_keep <= len(tokens):
            raise StateError("The saved state's header is invalid (n_keep).")
        if not isinstance(layout, dict) or not isinstance(extra, dict):
            raise StateError("The saved state's header is invalid.")
        n_dropped = extra.get("n_dropped", 0)
        if type(n_dropped) is not int or n_dropped < 0:
            raise StateError("The saved state's header is invalid (n_dropped).")
        return cls(
            model_fingerprint=str(header.get("model_fingerprint", "")),
            layout=layout,
            tokens=tokens,
            blob=blob,
            pending=pending,
            n_keep=n_keep,
            extra=extra,
            checkpoints=checkpoints,
        )

    def check_compatible(self, model_fingerprint: str, layout: dict[str, Any]) -> None:
        if self.model_fingerprint != model_fingerprint:
            raise StateError("The saved state belongs to another model file.")
        if self.layout != layout:
            changed = sorted(
                k for k in set(layout) | set(self.layout) if layout.get(k) != self.layout.get(k)
            )
            raise StateError(
                f"The saved state was made with other cache settings ({', '.join(changed)})."
            )


def _checkpoints(header: dict[str, Any], tail: memoryview) -> list[Checkpoint]:
    """The checkpoints after the cache data, checked against the header."""
    entries = header.get("checkpoints", [])
    if not isinstance(entries, list) or not all(
        isinstance(e, list) and len(e) == 3 and all(type(v) is int and v >= 0 for v in e)
        for e in entries
    ):
        raise StateError("The saved state's list of checkpoints is invalid.")
    if sum(e[1] + e[2] for e in entries) != len(tail):
        raise StateError("The saved state's checkpoints are truncated or too long.")
    if tail and _digest(tail).hex() != header.get("checkpoints_hash"):
        raise StateError("The saved checkpoints are damaged (checksum mismatch).")
    tokens = header.get("tokens")
    n_held = len(tokens) if isinstance(tokens, list) else 0
    result: list[Checkpoint] = []
    offset = 0
    for n_tokens, blob_size, logits_size in entries:
        if n_tokens > n_held or (result and n_tokens <= result[-1].n_tokens):
            raise StateError("The saved state's checkpoints are out of order.")
        blob = bytes(tail[offset : offset + blob_size])
        offset += blob_size
        logits = bytes(tail[offset : offset + logits_size]) if logits_size else None
        offset += logits_size
        result.append(Checkpoint(n_tokens, blob, logits))
    return result
