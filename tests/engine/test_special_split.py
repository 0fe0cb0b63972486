"""Long texts with special tokens: the Python partition gives llama.cpp's tokens, quickly.

Each model is tokenized twice, once through :func:`app.engine.special_split.partition`
(the threshold lowered so that short texts take that path) and once by llama.cpp alone,
and the two must agree token for token, with and without special parsing and BOS/EOS.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import gguf
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.engine import special_split
from app.engine.model import Model
from app.engine.special_split import (
    ATTR_CONTROL,
    ATTR_RSTRIP,
    ATTR_USER_DEFINED,
    SpecialToken,
    SpecialTokens,
    partition,
)
from tests.support.big_vocab import write_big_vocab_model
from tests.support.gguf_models import add_llama_header, llama_tensor_shapes, vocabulary

# Extra tokens for the SentencePiece vocabulary: user-defined ones (split even without
# special parsing), and texts that are prefixes/suffixes of each other.
EXTRA = (
    ("<|user|>", gguf.TokenType.USER_DEFINED),
    ("<|end|>", gguf.TokenType.CONTROL),
    ("<mask>", gguf.TokenType.USER_DEFINED),
    ("<|im", gguf.TokenType.USER_DEFINED),
    ("[INST]", gguf.TokenType.CONTROL),
    # llama.cpp's phi3 rule looks this one up and fails the load without it
    ("<|endoftext|>", gguf.TokenType.CONTROL),
)


def _write_spm(path: Path, name: str, pre: str | None = None) -> Path:
    tokens, scores, types = vocabulary()
    for text, kind in EXTRA:
        tokens.append(text)
        scores.append(0.0)
        types.append(int(kind))
    writer = gguf.GGUFWriter(str(path), "llama")
    add_llama_header(
        writer,
        name=name,
        n_ctx_train=512,
        n_embd=32,
        n_layer=1,
        n_ff=64,
        n_head=2,
        n_head_kv=1,
        file_type=gguf.LlamaFileType.ALL_F32,
        vocab=(tokens, scores, types),
    )
    if pre is not None:
        writer.add_tokenizer_pre(pre)
    rng = np.random.default_rng(0)
    for tensor, shape in llama_tensor_shapes(len(tokens), 32, 2, 1, 1, 64):
        writer.add_tensor(tensor, rng.standard_normal(shape).astype(np.float32) * 0.1)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


# "phi3" in the name gives every special token RSTRIP (llama.cpp sets it by model name);
# the jina pre-tokenizer name gives "<mask>" LSTRIP.
MODELS = ("spm", "spm-phi3-rstrip", "spm-jina-lstrip", "qwen2-152k", "llama3-128k")


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Model]]:
    folder = tmp_path_factory.mktemp("special-split")
    paths = {
        "spm": _write_spm(folder / "spm.gguf", "tiny-test-llama"),
        "spm-phi3-rstrip": _write_spm(folder / "phi3.gguf", "Tiny-Phi3"),
        "spm-jina-lstrip": _write_spm(folder / "jina.gguf", "tiny-jina", pre="jina-v2-de"),
        "qwen2-152k": write_big_vocab_model(folder / "qwen2.gguf", "qwen2", n_embd=8),
        "llama3-128k": write_big_vocab_model(folder / "llama3.gguf", "llama3", n_embd=8),
    }
    loaded = {name: Model(path) for name, path in paths.items()}
    yield loaded
    for model in loaded.values():
        model.close()


def _specials(model: Model) -> list[str]:
    return [t.text.decode("utf-8", "replace") for t in model._special_tokens().tokens[:40]]


PLAIN = ("a", " ", "  ", "\n", "hello", " world", "<", "|", "im", ">", "é", "\t", "x>")


def _check(model: Model, text: str, monkeypatch: pytest.MonkeyPatch) -> None:
    data = text.encode()
    for add_special in (True, False):
        for parse_special in (True, False):
            expected = model._tokenize_bytes(data, add_special, parse_special)
            with monkeypatch.context() as m:
                m.setattr(special_split, "LONG_TEXT", 0)
                got = model.tokenize(text, add_special, parse_special)
            assert got == expected, (text, add_special, parse_special)


@pytest.mark.parametrize("name", MODELS)
def test_the_attributes_the_cases_rely_on(models: dict[str, Model], name: str) -> None:
    tokens = {t.text: t for t in models[name]._special_tokens().tokens}
    if name == "spm-phi3-rstrip":
        assert tokens[b"<|end|>"].attr & ATTR_RSTRIP
    if name == "spm-jina-lstrip":
        assert tokens[b"<mask>"].attr & special_split.ATTR_LSTRIP
    if name.startswith("spm"):
        assert tokens[b"<|user|>"].attr & ATTR_USER_DEFINED
        assert tokens[b"<|im_end|>"].attr & ATTR_CONTROL


@pytest.mark.parametrize("name", MODELS)
@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_partitioned_tokens_equal_llama_cpps(
    models: dict[str, Model], name: str, data: st.DataObject, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = models[name]
    parts = st.sampled_from(PLAIN + tuple(_specials(model)))
    text = "".join(data.draw(st.lists(parts, max_size=30)))
    _check(model, text, monkeypatch)


@pytest.mark.parametrize("name", MODELS)
def test_fixed_cases_equal_llama_cpps(
    models: dict[str, Model], name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    specials = _specials(models[name])
    cases = [
        "",
        " ",
        "plain text only",
        "".join(specials),
        " ".join(specials) + " ",
        "\n".join(f"  {s}  x" for s in specials),
        "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n",
        "<|im<|im_end|>>" * 3,
        "a <mask> b<mask>c  <mask>  ",
        "<|end|>\n\n<|end|> <|user|>  tail",
    ]
    for text in cases:
        _check(models[name], text, monkeypatch)


@pytest.mark.parametrize("name", ["spm", "qwen2-152k"])
def test_a_long_text_of_special_tokens_never_reaches_llama_cpp_whole(
    models: dict[str, Model], name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # llama.cpp's partition is quadratic in the special tokens it finds (8.5 s for 80,000
    # characters of "<s>x"; benchmarks/bench_tokenize.py measures it): such a text must
    # reach it only as the plain pieces between the tokens.
    model = models[name]
    unit = "<|im_start|>x" if name == "spm" else "<|im_start|>x<|im_end|>"
    text = unit * (40_000 // len(unit))
    seen: list[int] = []
    whole = model._tokenize_bytes

    def recording(data: bytes, add_special: bool, parse_special: bool) -> list[int]:
        seen.append(len(data))
        return whole(data, add_special, parse_special)

    monkeypatch.setattr(model, "_tokenize_bytes", recording)
    tokens = model.tokenize(text)
    assert seen and max(seen) <= 1
    monkeypatch.undo()
    assert tokens == model._tokenize_bytes(text.encode(), True, True)


def test_tokens_of_equal_length_that_can_overlap_are_left_to_llama_cpp() -> None:
    # llama.cpp sorts equal lengths with std::sort: which of "<ab" and "ab>" wins in
    # "<ab>" is unspecified there, so the partition does not guess.
    special = SpecialTokens.of(
        [SpecialToken(1, b"<ab", ATTR_CONTROL), SpecialToken(2, b"ab>", ATTR_CONTROL)]
    )
    assert partition(b"x<ab>y", special, True) is None
    # when only one of them occurs, the order cannot matter
    assert partition(b"x<abyy", special, True) == [b"x", 1, b"yy"]


def test_rstrip_and_lstrip_drop_the_spaces_next_to_the_token() -> None:
    special = SpecialTokens.of(
        [
            SpecialToken(5, b"<r>", ATTR_CONTROL | ATTR_RSTRIP),
            SpecialToken(6, b"<l>", ATTR_USER_DEFINED | special_split.ATTR_LSTRIP),
        ]
    )
    assert partition(b"a <r>  b  <l> c", special, True) == [b"a ", 5, b"b", 6, b" c"]
    # without special parsing only the user-defined token is split off
    assert partition(b"a <r>  b  <l> c", special, False) == [b"a <r>  b", 6, b" c"]


def test_many_tokens_of_one_length_that_cannot_overlap_are_still_split() -> None:
    # a vocabulary's thousands of "<unusedNNNN>" tokens, all in one text: no order question
    special = SpecialTokens.of(
        [SpecialToken(i, b"<unused%04d>" % i, ATTR_CONTROL) for i in range(3000)]
    )
    data = b"".join(t.text + b" x" for t in special.tokens)
    fragments = partition(data, special, True)
    assert fragments is not None and len(fragments) == 6000
    assert fragments[:4] == [0, b" x", 1, b" x"]
