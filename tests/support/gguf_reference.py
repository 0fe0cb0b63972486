"""The former ``read_model_info`` on ``gguf``'s ``GGUFReader``: the reference that the fast
header reader (:mod:`app.engine.gguf_header`) is compared with in tests and benchmarks.

Slow on real vocabularies (a numpy view per array element: 10-14 s for 150k tokens), so
nothing in the app uses it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gguf

from app.engine.metadata import ENCODER_ARCHITECTURES, ModelInfo


def _file_type_name(value: int | None) -> str:
    if value is None:
        return "unknown"
    try:
        name = gguf.LlamaFileType(value).name
    except ValueError:
        return f"type {value}"
    return name.removeprefix("MOSTLY_").removeprefix("ALL_").replace("GUESSED", "").strip("_")


def reference_model_info(path: Path) -> ModelInfo:
    """ModelInfo as the GGUFReader-based reader made it (no arch_params, no load checks)."""
    reader = gguf.GGUFReader(str(path), "r")
    fields = reader.fields

    def scalar(key: str, default: Any = None) -> Any:
        f = fields.get(key)
        if f is None or not f.data:
            return default
        value = f.contents()
        if isinstance(value, list):
            numeric = [v for v in value if isinstance(v, int | float)]
            return max(numeric) if numeric else default
        return value

    arch = scalar("general.architecture")
    n_embd = int(scalar(f"{arch}.embedding_length", 0) or 0)
    n_head = int(scalar(f"{arch}.attention.head_count", 0) or 0)
    n_head_kv = int(scalar(f"{arch}.attention.head_count_kv", n_head) or n_head)
    default_head = n_embd // n_head if n_head else 0
    tokens = fields.get("tokenizer.ggml.tokens")
    n_vocab = len(tokens.data) if tokens is not None else 0
    bos_id = int(scalar("tokenizer.ggml.bos_token_id", -1))
    eos_id = int(scalar("tokenizer.ggml.eos_token_id", -1))

    def token_text(token_id: int) -> str:
        if tokens is None or not 0 <= token_id < n_vocab:
            return ""
        return bytes(tokens.parts[tokens.data[token_id]]).decode("utf-8", errors="replace")

    template = scalar("tokenizer.chat_template")
    return ModelInfo(
        path=str(path.resolve()),
        size_bytes=path.stat().st_size,
        architecture=arch,
        name=str(scalar("general.name", "") or ""),
        n_params=sum(int(t.n_elements) for t in reader.tensors),
        file_type=_file_type_name(scalar("general.file_type")),
        n_ctx_train=int(scalar(f"{arch}.context_length", 0) or 0),
        n_layer=int(scalar(f"{arch}.block_count", 0) or 0),
        n_embd=n_embd,
        n_head=n_head,
        n_head_kv=n_head_kv,
        head_dim_k=int(scalar(f"{arch}.attention.key_length", default_head) or default_head),
        head_dim_v=int(scalar(f"{arch}.attention.value_length", default_head) or default_head),
        n_vocab=n_vocab,
        tokenizer=str(scalar("tokenizer.ggml.model", "") or ""),
        chat_template=template if isinstance(template, str) and template.strip() else None,
        bos_token=token_text(bos_id),
        eos_token=token_text(eos_id),
        bos_token_id=bos_id,
        eos_token_id=eos_id,
        has_encoder=arch in ENCODER_ARCHITECTURES
        or any(t.name.startswith("enc.") for t in reader.tensors),
    )
