"""The tool-call tests' model: a tiny random-weight model with Qwen 2.5's chat template
(a Hermes-style template that renders tools and calls), written once per test module."""

from __future__ import annotations

from pathlib import Path

from tests.support.gguf_models import TinySpec, write_tiny_model

QWEN25 = Path(__file__).resolve().parents[1] / "data/chat-templates/Qwen-Qwen2.5-7B-Instruct.jinja"


def write_qwen25_model(folder: Path, n_ctx_train: int) -> Path:
    return write_tiny_model(
        folder / "qwen25.gguf",
        TinySpec(chat_template=QWEN25.read_text(), n_ctx_train=n_ctx_train),
    )
