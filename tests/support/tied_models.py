"""Quantized tied-embedding variants of every family's tiny model (issue 27).

SmolLM2 and Gemma 3 have no ``output.weight``: llama.cpp computes the logits with
``token_embd.weight``, here Q8_0 as in those files, so the embedding reaches a MUL_MAT
(where llama.cpp's AMX kernels crashed on a batch with several logits rows). The tiny
models of :mod:`tests.support.arch_models` are written with f32 weights, a vocabulary
padded to a multiple of 32 tokens (so AMX would take the embedding: its rows must be
32-aligned) and no output matrix, then quantized by llama.cpp's own quantizer (Q4_0
matrices, a Q8_0 embedding). llama.cpp's gpt-oss and rwkv7 require their own output
matrix (:data:`NEEDS_OUTPUT`): theirs is kept, Q8_0 as well.
"""

from __future__ import annotations

from pathlib import Path

import gguf
import llama_cpp

from tests.support.arch_models import SmallVocab, small_vocab, write_arch_model

GGML_TYPE_Q8_0 = 8
# Families whose llama.cpp loader requires output.weight (it refuses a tied file).
NEEDS_OUTPUT = frozenset({"gpt-oss", "rwkv7"})


def padded_vocab(multiple: int = 32) -> SmallVocab:
    """The small vocabulary with plain word tokens added up to a multiple of ``multiple``."""
    vocab = small_vocab()
    tokens, scores, types = list(vocab.tokens), list(vocab.scores), list(vocab.types)
    while len(tokens) % multiple:
        tokens.append(f"▁pad{len(tokens)}")
        scores.append(-1000.0)
        types.append(int(gguf.TokenType.NORMAL))
    return SmallVocab(tokens, scores, types)


def write_tied_quantized(
    folder: Path, arch: str, *, seed: int = 0, tied: bool | None = None
) -> Path:
    """``<folder>/<arch>-tied-q4_0.gguf``: ``arch``'s tiny model, tied (unless ``arch`` is
    in :data:`NEEDS_OUTPUT`, or ``tied`` says otherwise) and quantized."""
    folder.mkdir(parents=True, exist_ok=True)
    if tied is None:
        tied = arch not in NEEDS_OUTPUT
    source = write_arch_model(
        folder / f"{arch}-tied-f32.gguf", arch, seed=seed, vocab=padded_vocab(), tied=tied
    )
    target = folder / f"{arch}-tied-q4_0.gguf"
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_0
    params.token_embedding_type = GGML_TYPE_Q8_0
    params.output_tensor_type = GGML_TYPE_Q8_0
    params.nthread = 1
    rc = llama_cpp.llama_model_quantize(str(source).encode(), str(target).encode(), params)
    if rc != 0:
        raise RuntimeError(f"llama.cpp could not quantize {source.name} (code {rc})")
    source.unlink()
    return target
