"""What a GGUF file says about itself, read without loading the weights.

The model manager lists dozens of files, so this reads only the header through the
``gguf`` package (memory-mapped), and every way a file can be broken becomes a
:class:`ModelLoadError` that names the file and the problem.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.engine.errors import ModelLoadError

GGUF_MAGIC = b"GGUF"

# Architectures with an encoder (llama_model_has_encoder); decoding starts after llama_encode.
ENCODER_ARCHITECTURES = {"t5", "t5encoder"}


# gguf's LlamaFileType names, shortened to what users know from file names.
def _file_type_name(value: int | None) -> str:
    if value is None:
        return "unknown"
    try:
        import gguf

        name = gguf.LlamaFileType(value).name
    except (ValueError, ImportError):
        return f"type {value}"
    return name.removeprefix("MOSTLY_").removeprefix("ALL_").replace("GUESSED", "").strip("_")


@dataclass(frozen=True)
class ModelInfo:
    """Metadata of one GGUF file; ``to_dict`` is what storage caches."""

    path: str
    size_bytes: int
    architecture: str
    name: str
    n_params: int
    file_type: str
    n_ctx_train: int
    n_layer: int
    n_embd: int
    n_head: int
    n_head_kv: int
    head_dim_k: int
    head_dim_v: int
    n_vocab: int
    tokenizer: str
    chat_template: str | None
    bos_token: str
    eos_token: str
    bos_token_id: int
    eos_token_id: int
    has_encoder: bool

    @property
    def n_embd_k_gqa(self) -> int:
        return self.head_dim_k * self.n_head_kv

    @property
    def n_embd_v_gqa(self) -> int:
        return self.head_dim_v * self.n_head_kv

    @property
    def display_name(self) -> str:
        return self.name or Path(self.path).stem

    @property
    def params_label(self) -> str:
        n = self.n_params
        for unit, scale in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
            if n >= scale:
                return f"{n / scale:.1f}{unit}"
        return str(n)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ModelInfo:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


def check_gguf_file(path: str | os.PathLike[str]) -> Path:
    """Cheap checks before anything parses the file; returns the resolved path."""
    p = Path(path).expanduser()
    if not p.exists():
        raise ModelLoadError(
            f"The model file {p} does not exist. Check the path or add the file again."
        )
    if p.is_dir():
        raise ModelLoadError(f"{p} is a folder, not a model file. Choose a .gguf file inside it.")
    try:
        size = p.stat().st_size
        with p.open("rb") as fh:
            magic = fh.read(4)
    except OSError as exc:
        raise ModelLoadError(f"The model file {p} cannot be read: {exc.strerror or exc}.") from exc
    if size == 0:
        raise ModelLoadError(
            f"The model file {p.name} is empty (0 bytes). Download or copy it again."
        )
    if magic != GGUF_MAGIC:
        raise ModelLoadError(
            f"{p.name} is not a GGUF model file (it does not start with 'GGUF'). "
            "LlamaDesk reads GGUF files only; convert the model with llama.cpp's tools."
        )
    return p


def read_model_info(path: str | os.PathLike[str]) -> ModelInfo:
    """Read a GGUF header. Raises :class:`ModelLoadError` for anything broken."""
    p = check_gguf_file(path)
    try:
        import gguf

        reader = gguf.GGUFReader(str(p), "r")
    except Exception as exc:  # the reader raises ValueError, IndexError, struct errors...
        raise ModelLoadError(_reader_failure(p, exc)) from exc
    size = p.stat().st_size
    try:
        return _info_from_reader(reader, p, size)
    except ModelLoadError:
        raise
    except Exception as exc:
        raise ModelLoadError(
            f"{p.name} has metadata LlamaDesk cannot read ({_short(exc)})."
        ) from exc


def _reader_failure(p: Path, exc: BaseException) -> str:
    text = str(exc)
    match = re.search(r"version (\d+)", text)
    if match:
        return (
            f"{p.name} is GGUF version {match.group(1)}, which LlamaDesk cannot read "
            "(the file is damaged, or newer than this version of LlamaDesk)."
        )
    return f"{p.name} is damaged or truncated: its header cannot be read. Download or copy the file again."


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return text[:160]


def _info_from_reader(reader: Any, p: Path, size: int) -> ModelInfo:
    fields = reader.fields

    def scalar(key: str, default: Any = None) -> Any:
        f = fields.get(key)
        if f is None or not f.data:
            return default
        value = f.contents()
        if isinstance(value, list):  # per-layer arrays (e.g. head counts): take the max
            numeric = [v for v in value if isinstance(v, int | float)]
            return max(numeric) if numeric else default
        return value

    arch = scalar("general.architecture")
    if not isinstance(arch, str) or not arch:
        raise ModelLoadError(
            f"{p.name} does not say which model architecture it is (general.architecture is missing)."
        )

    last_tensor_end = 0
    n_params = 0
    for t in reader.tensors:
        n_params += int(t.n_elements)
        last_tensor_end = max(last_tensor_end, int(t.data_offset) + int(t.n_bytes))
    if last_tensor_end > size:
        raise ModelLoadError(
            f"{p.name} is truncated: its tensors need {last_tensor_end:,} bytes but the file has "
            f"{size:,}. Download or copy it again."
        )

    n_embd = int(scalar(f"{arch}.embedding_length", 0) or 0)
    n_head = int(scalar(f"{arch}.attention.head_count", 0) or 0)
    n_head_kv = int(scalar(f"{arch}.attention.head_count_kv", n_head) or n_head)
    default_head = n_embd // n_head if n_head else 0
    head_k = int(scalar(f"{arch}.attention.key_length", default_head) or default_head)
    head_v = int(scalar(f"{arch}.attention.value_length", default_head) or default_head)

    tokens = fields.get("tokenizer.ggml.tokens")
    n_vocab = len(tokens.data) if tokens is not None else 0
    bos_id = int(scalar("tokenizer.ggml.bos_token_id", -1))
    eos_id = int(scalar("tokenizer.ggml.eos_token_id", -1))

    def token_text(token_id: int) -> str:
        if tokens is None or not 0 <= token_id < n_vocab:
            return ""
        part = tokens.parts[tokens.data[token_id]]
        return bytes(part).decode("utf-8", errors="replace")

    template = scalar("tokenizer.chat_template")
    has_encoder = arch in ENCODER_ARCHITECTURES or any(
        t.name.startswith("enc.") for t in reader.tensors
    )
    return ModelInfo(
        path=str(p.resolve()),
        size_bytes=size,
        architecture=arch,
        name=str(scalar("general.name", "") or ""),
        n_params=n_params,
        file_type=_file_type_name(scalar("general.file_type")),
        n_ctx_train=int(scalar(f"{arch}.context_length", 0) or 0),
        n_layer=int(scalar(f"{arch}.block_count", 0) or 0),
        n_embd=n_embd,
        n_head=n_head,
        n_head_kv=n_head_kv,
        head_dim_k=head_k,
        head_dim_v=head_v,
        n_vocab=n_vocab,
        tokenizer=str(scalar("tokenizer.ggml.model", "") or ""),
        chat_template=template if isinstance(template, str) and template.strip() else None,
        bos_token=token_text(bos_id),
        eos_token=token_text(eos_id),
        bos_token_id=bos_id,
        eos_token_id=eos_id,
        has_encoder=has_encoder,
    )


def fingerprint(path: str | os.PathLike[str]) -> str:
    """Identify a model file's exact weights cheaply.

    The size plus a hash of the first 8 MiB (the header and the first tensors), 32 samples
    spread over the rest and the last MiB. Two models of the same shape with other weights
    differ here; hashing a 40 GB file whole would take minutes.
    """
    p = Path(path)
    size = p.stat().st_size
    h = hashlib.blake2b(digest_size=16)
    h.update(size.to_bytes(8, "little"))
    head = 8 << 20
    with p.open("rb") as fh:
        if size <= head + (1 << 20) + 32 * 65536:
            h.update(fh.read())
        else:
            h.update(fh.read(head))
            step = (size - head) // 33
            for i in range(1, 33):
                fh.seek(head + i * step)
                h.update(fh.read(65536))
            fh.seek(size - (1 << 20))
            h.update(fh.read())
    return h.hexdigest()
