"""The GBNF grammars in resources/grammars: llama.cpp parses them, and a random-weight
tiny model constrained by them writes replies of the reasoning shape they promise."""

from __future__ import annotations

import ctypes
from collections.abc import Iterator
from pathlib import Path

import llama_cpp
import pytest

from app.engine.reasoning import ReasoningFormat, split_reasoning

GRAMMARS_DIR = Path(__file__).resolve().parents[2] / "resources" / "grammars"

# grammar file -> (format, prompt opened the reasoning, has reasoning)
SHAPES: dict[str, tuple[ReasoningFormat, bool, bool]] = {
    "think-then-answer": (ReasoningFormat.THINK_TAGS, False, True),
    "open-think-answer": (ReasoningFormat.THINK_TAGS, True, True),
    "think-brackets": (ReasoningFormat.THINK_BRACKETS, False, True),
    "harmony": (ReasoningFormat.HARMONY, False, True),
    "answer-only": (ReasoningFormat.THINK_TAGS, False, False),
}


@pytest.fixture(scope="module")
def model(tiny_model: Path) -> Iterator[llama_cpp.llama_model_p]:
    params = llama_cpp.llama_model_default_params()
    handle = llama_cpp.llama_model_load_from_file(str(tiny_model).encode(), params)
    assert handle
    yield handle
    llama_cpp.llama_model_free(handle)


def _generate(model: llama_cpp.llama_model_p, grammar: str, max_tokens: int = 200) -> str:
    vocab = llama_cpp.llama_model_get_vocab(model)
    ctx_params = llama_cpp.llama_context_default_params()
    ctx_params.n_ctx = 512
    ctx_params.n_batch = 512
    ctx = llama_cpp.llama_init_from_model(model, ctx_params)
    assert ctx
    chain = llama_cpp.llama_sampler_chain_init(llama_cpp.llama_sampler_chain_default_params())
    try:
        sampler = llama_cpp.llama_sampler_init_grammar(vocab, grammar.encode(), b"root")
        assert sampler, "llama.cpp could not parse the grammar"
        llama_cpp.llama_sampler_chain_add(chain, sampler)
        llama_cpp.llama_sampler_chain_add(chain, llama_cpp.llama_sampler_init_greedy())
        prompt = b"hello"
        tokens = (llama_cpp.llama_token * 16)()
        n = llama_cpp.llama_tokenize(vocab, prompt, len(prompt), tokens, 16, True, False)
        assert n > 0
        batch = llama_cpp.llama_batch_get_one(tokens, n)
        pieces = bytearray()
        buf = ctypes.create_string_buffer(64)
        for _ in range(max_tokens):
            assert llama_cpp.llama_decode(ctx, batch) == 0
            token = llama_cpp.llama_sampler_sample(chain, ctx, -1)
            if llama_cpp.llama_vocab_is_eog(vocab, token):
                break
            size = llama_cpp.llama_token_to_piece(vocab, token, buf, len(buf), 0, False)
            pieces += buf.raw[:size]
            one = (llama_cpp.llama_token * 1)(token)
            batch = llama_cpp.llama_batch_get_one(one, 1)
        return pieces.decode("utf-8")
    finally:
        llama_cpp.llama_sampler_free(chain)
        llama_cpp.llama_free(ctx)


def test_every_grammar_is_listed() -> None:
    assert sorted(p.stem for p in GRAMMARS_DIR.glob("*.gbnf")) == sorted(SHAPES)


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_grammar_gives_the_reasoning_shape(model: llama_cpp.llama_model_p, name: str) -> None:
    grammar = (GRAMMARS_DIR / f"{name}.gbnf").read_text(encoding="utf-8")
    reply = _generate(model, grammar)
    assert reply == _generate(model, grammar)  # deterministic
    fmt, opened, has_reasoning = SHAPES[name]
    reasoning, answer = split_reasoning(reply, fmt, opened)
    assert answer.split(), reply
    assert bool(reasoning.split()) is has_reasoning, reply
    for text in (reasoning, answer):
        assert "<" not in text and "[" not in text, reply
