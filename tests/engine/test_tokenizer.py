"""Tokenizing off the engine's thread: bounded (a long text refused early) and safe
against the model's unload (app.engine.tokenizer)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.engine.model import Model
from app.engine.tokenizer import (
    PIECE_CHARS,
    ModelGoneError,
    TextTooLongError,
    pieces,
    tokenize_bounded,
)
from tests.support.arch_models import write_arch_model
from tests.support.gguf_models import write_tiny_model

# Each longer than PIECE_CHARS (the pieces path), and short enough for a test: llama.cpp's
# tokenizer is quadratic in a run without spaces (SentencePiece, 200k characters: 14 s) and
# in the number of special tokens in a text (8,000: 3 s).
TEXTS = {
    "words": "hello world, the llama eats grass.\n" * 3000,  # 105k characters
    "no spaces": "hello" * 8_000,
    "specials": "<|im_start|>user\nhi<|im_end|>\n" * 2000,
    "mixed": "数字 123 émigré\t\ttabs  and   spaces " * 3000,
}


@pytest.fixture(scope="module", params=["spm-small", "bpe-152k"])
def model(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Model]:
    folder = tmp_path_factory.mktemp("tok")
    if request.param == "spm-small":
        path = write_tiny_model(folder / "tiny.gguf")
    else:
        path = write_arch_model(folder / "qwen3.gguf", "qwen3", vocab="qwen2-152k")
    m = Model(path)
    yield m
    m.close()


def test_pieces_cover_the_text_and_cut_before_spaces() -> None:
    for text in TEXTS.values():
        parts = list(pieces(text, 1000))
        assert "".join(parts) == text
        assert all(0 < len(p) <= 1000 for p in parts)
        if " " in text:
            assert all(p.startswith((" ", "\n")) for p in parts[1:])
    assert list(pieces("short", 1000)) == ["short"]


@pytest.mark.parametrize("name", list(TEXTS))
def test_a_text_that_fits_gets_exactly_its_whole_tokenization(model: Model, name: str) -> None:
    text = TEXTS[name]
    assert len(text) > PIECE_CHARS  # the pieces path
    whole = model.tokenize(text, add_special=True, parse_special=True)
    limit = len(whole)
    assert tokenize_bounded(model, text, limit, add_special=True, parse_special=True) == whole
    with pytest.raises(TextTooLongError) as refused:
        tokenize_bounded(model, text, limit - 1, add_special=True, parse_special=True)
    assert refused.value.at_least == limit  # near the limit the exact count decides


@pytest.mark.parametrize("name", list(TEXTS))
def test_a_long_text_is_refused_after_reading_about_the_limit(
    model: Model, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = TEXTS[name] * 2
    true_count = len(model.tokenize(text, add_special=True, parse_special=True))
    read: list[int] = []
    tokenize = model.tokenize

    def counting(piece: str, add_special: bool = True, parse_special: bool = True) -> list[int]:
        read.append(len(piece))
        return tokenize(piece, add_special, parse_special)

    monkeypatch.setattr(model, "tokenize", counting)
    limit = 1024
    with pytest.raises(TextTooLongError) as refused:
        tokenize_bounded(model, text, limit, add_special=True, parse_special=True)
    assert limit < refused.value.at_least <= true_count  # a true lower bound
    assert "at least" in str(refused.value)
    assert sum(read) <= 2 * PIECE_CHARS + limit * 8  # not the whole text
    assert sum(read) <= len(text) // 2


def test_an_unload_waits_for_a_tokenizing_thread_then_refuses(tmp_path: Path) -> None:
    m = Model(write_tiny_model(tmp_path / "tiny.gguf"))
    inside, release = threading.Event(), threading.Event()

    def hold() -> None:
        with m.lease.hold():
            inside.set()
            release.wait(10)
            m.tokenize("still valid")  # the vocabulary is not freed under a holder

    holder = threading.Thread(target=hold)
    holder.start()
    assert inside.wait(10)
    closer = threading.Thread(target=m.close)
    closer.start()
    closer.join(0.3)
    assert closer.is_alive() and m.handle  # close waits for the holder
    release.set()
    holder.join(10)
    closer.join(10)
    assert not closer.is_alive() and not m.handle
    with pytest.raises(ModelGoneError):
        tokenize_bounded(m, "hello", 100, add_special=True, parse_special=True)
