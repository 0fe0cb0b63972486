"""Whether llama.cpp's own grammar sampler lets a model write a given text: the text is fed
byte by byte (the tiny model's byte tokens), each byte token checked against the grammar
before it is accepted, then the end of the reply."""

from __future__ import annotations

import ctypes
import math

import llama_cpp

BYTE_TOKEN_BASE = 3  # tests/support/gguf_models.vocabulary(): <unk>, <s>, </s>, then <0x00>...


def _allowed(sampler: llama_cpp.llama_sampler_p, token: int) -> bool:
    data = (llama_cpp.llama_token_data * 1)()
    data[0].id = llama_cpp.llama_token(token)
    data[0].logit = 0.0
    data[0].p = 0.0
    array = llama_cpp.llama_token_data_array(data=data, size=1, selected=-1, sorted=False)
    llama_cpp.llama_sampler_apply(sampler, ctypes.byref(array))
    return not math.isinf(data[0].logit)


def grammar_accepts(model: llama_cpp.llama_model_p, grammar: str, text: str) -> bool:
    """Whether ``grammar`` (rooted at ``root``) accepts exactly ``text``."""
    vocab = llama_cpp.llama_model_get_vocab(model)
    sampler = llama_cpp.llama_sampler_init_grammar(vocab, grammar.encode(), b"root")
    assert sampler, "llama.cpp could not parse the grammar"
    try:
        for byte in text.encode("utf-8"):
            token = BYTE_TOKEN_BASE + byte
            if not _allowed(sampler, token):
                return False
            llama_cpp.llama_sampler_accept(sampler, token)
        return _allowed(sampler, llama_cpp.llama_vocab_eos(vocab))
    finally:
        llama_cpp.llama_sampler_free(sampler)


def lazy_grammar_accepts(
    model: llama_cpp.llama_model_p, grammar: str, patterns: tuple[str, ...], text: str
) -> bool:
    """Whether a lazy grammar (started by llama.cpp at ``patterns``) lets a model write
    ``text``. An invalid pattern aborts the process (std::regex throws through the C API):
    run this in a child process."""
    vocab = llama_cpp.llama_model_get_vocab(model)
    words = (ctypes.c_char_p * len(patterns))(*(p.encode() for p in patterns))
    sampler = llama_cpp.llama_sampler_init_grammar_lazy_patterns(
        vocab, grammar.encode(), b"root", words, len(patterns), None, 0
    )
    assert sampler, "llama.cpp could not build the lazy grammar"
    try:
        for byte in text.encode("utf-8"):
            token = BYTE_TOKEN_BASE + byte
            if not _allowed(sampler, token):
                return False
            llama_cpp.llama_sampler_accept(sampler, token)
        return _allowed(sampler, llama_cpp.llama_vocab_eos(vocab))
    finally:
        llama_cpp.llama_sampler_free(sampler)
