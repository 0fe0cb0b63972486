"""The GGUF header reader: same metadata as gguf's GGUFReader, real-size vocabularies,
irregular string arrays, the raw architecture numbers."""

from __future__ import annotations

import ctypes
import json
from pathlib import Path

import gguf
import llama_cpp
import numpy as np
import pytest

from app.engine import ModelLoadError, read_model_info
from app.engine.backend import ensure_backend
from app.engine.gguf_header import GGML_TYPE_SIZES, GGUFArray, read_header
from app.engine.header_checks import duplicate_tokens, llama_token_texts
from app.engine.metadata import FILE_TYPE_NAMES, LLAMA_CPP_ARCHITECTURES, ArchParams, ModelInfo
from tests.support.big_vocab import bpe_vocab, write_big_vocab_model
from tests.support.gguf_models import TinySpec, write_tiny_model, write_tiny_t5
from tests.support.gguf_reference import reference_model_info

DEMO = Path(__file__).resolve().parents[2] / "resources" / "models" / "llamadesk-demo.gguf"


def without_arch_params(info: ModelInfo) -> dict[str, object]:
    data = info.to_dict()
    del data["arch_params"]
    return data


def test_same_info_as_the_gguf_reader(tmp_path: Path) -> None:
    files = [
        write_tiny_model(tmp_path / "tiny.gguf"),
        write_tiny_model(tmp_path / "plain.gguf", TinySpec(chat_template=None, n_head_kv=4)),
        write_tiny_t5(tmp_path / "t5.gguf"),
        DEMO,
    ]
    for path in files:
        assert without_arch_params(read_model_info(path)) == without_arch_params(
            reference_model_info(path)
        ), path
    vocab_only = write_tiny_model(tmp_path / "vocab.gguf", TinySpec(vocab_only=True))
    assert without_arch_params(
        read_model_info(vocab_only, check_loadable=False)
    ) == without_arch_params(reference_model_info(vocab_only))


def test_tables_agree_with_gguf_and_llama_cpp() -> None:
    for member in gguf.LlamaFileType:
        if member.name != "GUESSED":
            expected = member.name.removeprefix("MOSTLY_").removeprefix("ALL_")
            assert FILE_TYPE_NAMES[member.value] == expected
    for qtype, sizes in gguf.GGML_QUANT_SIZES.items():
        if qtype.name != "Q8_1":  # gguf-py's Q8_1 size is not ggml's (never in files)
            assert GGML_TYPE_SIZES[qtype.value] == sizes, qtype.name
    assert {"llama", "qwen2", "gemma3", "t5", "mamba2", "rwkv7", "lfm2"} <= LLAMA_CPP_ARCHITECTURES
    assert "(unknown)" not in LLAMA_CPP_ARCHITECTURES


def test_irregular_string_arrays(tmp_path: Path) -> None:
    """Empty strings, zero bytes, long and multi-byte strings: the fast walk's fallbacks."""
    rng = np.random.default_rng(3)
    pieces = ["", "\x00", "a\x00b", "x" * 256, "y" * 512, "é🦙", "\x00\x00\x00\x00\x00\x00\x00\x00"]
    arrays = {
        "test.mixed": [
            pieces[int(i)] if i < len(pieces) else f"w{i}" for i in rng.integers(0, 14, 5000)
        ],
        "test.empty_run": [""] * 300 + ["z"] * 300 + [""] * 10,
        "test.zeros": ["\x00" * int(n) for n in rng.integers(1, 20, 2000)],
        "test.regular": [f"tok{i}" for i in range(20000)],
        "test.small": ["", "a"],
    }
    path = tmp_path / "arrays.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    for key, values in arrays.items():
        writer.add_array(key, values)
    writer.add_array("test.numbers", [1, 2, 3])
    writer.add_uint32("test.after", 7)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    header = read_header(path)
    for key, values in arrays.items():
        assert header.fields[key].tolist() == values, key
    assert header.fields["test.numbers"].tolist() == [1, 2, 3]
    assert header.fields["test.after"] == 7
    assert header.fields["general.architecture"] == "llama"


@pytest.mark.parametrize("kind", ["qwen2", "llama3"])
def test_real_size_vocabulary(tmp_path: Path, kind: str) -> None:
    vocab = bpe_vocab(kind)
    path = write_big_vocab_model(tmp_path / f"{kind}.gguf", kind)
    info = read_model_info(path)
    assert info.n_vocab == vocab.n_vocab == len(vocab.tokens) > 128_000
    assert (info.bos_token_id, info.eos_token_id) == (vocab.bos_id, vocab.eos_id)
    expected = (
        ("<|endoftext|>", "<|im_end|>") if kind == "qwen2" else ("<|begin_of_text|>", "<|eot_id|>")
    )
    assert (info.bos_token, info.eos_token) == expected
    assert info.tokenizer == "gpt2" and info.chat_template == vocab.chat_template
    header = read_header(path)
    assert header.fields["tokenizer.ggml.tokens"].tolist() == list(vocab.tokens)
    assert header.fields["tokenizer.ggml.merges"].tolist() == list(vocab.merges)
    assert header.fields["tokenizer.ggml.pre"] == vocab.pre

    # llama.cpp reads the same vocabulary, and tokenizes text with it.
    ensure_backend()
    params = llama_cpp.llama_model_default_params()
    params.vocab_only = True
    model = llama_cpp.llama_model_load_from_file(str(path).encode(), params)
    assert model
    try:
        v = llama_cpp.llama_model_get_vocab(model)
        assert llama_cpp.llama_vocab_n_tokens(v) == info.n_vocab
        assert (
            ctypes.string_at(llama_cpp.llama_vocab_get_text(v, info.eos_token_id)).decode()
            == info.eos_token
        )
        text = "Hello world, the model is a llama: 日本語 🦙".encode()
        buf = (llama_cpp.llama_token * 256)()
        n = llama_cpp.llama_tokenize(v, text, len(text), buf, 256, False, True)
        assert 0 < n < len(text)
        out = bytearray()
        piece = ctypes.create_string_buffer(64)
        for tok in buf[:n]:
            k = llama_cpp.llama_token_to_piece(v, tok, piece, 64, 0, False)
            out += piece.raw[:k]
        assert bytes(out) == text
        special = f"{vocab.tokens[vocab.eos_id]}".encode()
        assert llama_cpp.llama_tokenize(v, special, len(special), buf, 256, False, True) == 1
        assert buf[0] == vocab.eos_id
    finally:
        llama_cpp.llama_model_free(model)


@pytest.mark.parametrize("kind", ["qwen2", "llama3"])
def test_generated_vocabulary_is_consistent(kind: str) -> None:
    vocab = bpe_vocab(kind)
    index = {t: i for i, t in enumerate(vocab.tokens)}
    assert len(index) == vocab.n_vocab  # no duplicates
    for merge in vocab.merges:
        a, b = merge.split(" ")
        assert a in index and b in index and (a + b) in index, merge
    for text, token_id in vocab.specials.items():
        assert vocab.tokens[token_id] == text and vocab.types[token_id] == gguf.TokenType.CONTROL
    assert bpe_vocab(kind) is vocab  # cached


def test_arch_params_are_read_raw_and_survive_the_cache(tmp_path: Path) -> None:
    path = tmp_path / "hybrid.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_uint32("llama.embedding_length", 64)
    writer.add_uint32("llama.attention.head_count", 4)
    writer.add_array("llama.attention.head_count_kv", [0, 2, 0, 2])
    writer.add_uint32("llama.attention.sliding_window", 512)
    writer.add_array("llama.attention.sliding_window_pattern", [True, False, True, False])
    writer.add_uint32("llama.ssm.conv_kernel", 4)
    writer.add_uint32("llama.ssm.state_size", 128)
    writer.add_uint32("llama.full_attention_interval", 4)
    writer.add_array("tokenizer.ggml.tokens", ["a", "b"])
    writer.add_tensor("token_embd.weight", np.zeros((2, 64), np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    info = read_model_info(path, check_loadable=False)  # no tokenizer: not loadable
    assert info.n_head_kv == 2  # the maximum, as before
    params = info.arch_params
    assert params.head_count_kv == (0, 2, 0, 2)
    assert params.sliding_window == 512
    assert params.sliding_window_pattern == (True, False, True, False)
    assert (params.ssm_conv_kernel, params.ssm_state_size) == (4, 128)
    assert params.full_attention_interval == 4 and params.wkv_head_size is None
    cached = json.loads(json.dumps(info.to_dict()))
    assert ModelInfo.from_dict(cached) == info
    older = {k: v for k, v in cached.items() if k != "arch_params"}
    assert ModelInfo.from_dict(older).arch_params == ArchParams()


def test_unloadable_reasons_can_be_skipped(tmp_path: Path) -> None:
    path = write_tiny_model(tmp_path / "vocab.gguf", TinySpec(vocab_only=True))
    with pytest.raises(ModelLoadError, match="only a vocabulary"):
        read_model_info(path)
    assert read_model_info(path, check_loadable=False).n_params == 0


def test_reading_metadata_does_not_load_llama_cpp() -> None:
    import subprocess
    import sys

    code = (
        "import sys, app.engine.metadata, app.engine.settings, app.engine.memory_estimate;"
        "assert 'llama_cpp' not in sys.modules, 'llama_cpp was loaded';"
        "from app.engine import Engine;"
        "assert 'llama_cpp' in sys.modules"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def _token_array(tmp_path: Path, tokens: list[bytes]) -> GGUFArray:
    path = tmp_path / "tokens.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_array(
        "tokenizer.ggml.tokens", [t.decode("utf-8", "surrogateescape") for t in tokens]
    )
    writer.add_uint32("test.after", 7)  # the array is not the last thing in the buffer
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.close()
    array: GGUFArray = read_header(path).fields["tokenizer.ggml.tokens"]  # fields: Any values
    assert [array.raw(i) for i in range(len(array))] == tokens
    return array


LONG = b"a-token-longer-than-sixteen-bytes"


@pytest.mark.parametrize(
    ("tokens", "expected"),
    [
        ([b"a", b"b", b"c"], None),
        ([b"a", b"b", b"a"], (0, 2)),
        ([b"x", b"ab\x00c", b"ab"], (1, 2)),  # read as C strings: "ab" twice
        ([b"x", b"", b"[EMPTY_1]"], (1, 2)),  # an empty token is renamed "[EMPTY_<id>]"
        ([b"", b""], None),  # two empty tokens get two names
        ([LONG, b"q", LONG], (0, 2)),
        ([LONG + b"\x00x", b"q", LONG], (0, 2)),
        ([b"zz", LONG[:5] + b"\x00" + LONG, LONG[:5]], (1, 2)),  # a long one cut short
        ([b"b", b"a", b"c", b"a", b"b"], (1, 3)),  # the pair llama.cpp meets first
    ],
)
def test_duplicate_tokens_as_llama_cpp_reads_them(
    tmp_path: Path, tokens: list[bytes], expected: tuple[int, int] | None
) -> None:
    array = _token_array(tmp_path, tokens)
    assert duplicate_tokens(array) == expected
    texts = llama_token_texts(array)
    assert (len(set(texts)) == len(texts)) == (expected is None)


def test_duplicate_check_on_a_real_size_vocabulary(tmp_path: Path) -> None:
    vocab = bpe_vocab("qwen2")
    tokens = [t.encode() for t in vocab.tokens]
    assert duplicate_tokens(_token_array(tmp_path, tokens)) is None
    damaged = list(tokens)
    damaged[150_000] = damaged[70_000] + b"\x00"
    assert duplicate_tokens(_token_array(tmp_path, damaged)) == (70_000, 150_000)
