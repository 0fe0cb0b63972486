"""Model files: metadata, and a corpus of broken files that must never crash the process."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.engine import Engine, ModelLoadError, read_model_info
from app.engine.metadata import fingerprint
from tests.support.broken_gguf import write_corpus
from tests.support.gguf_models import IM_END_ID


def test_metadata(tiny_model: Path) -> None:
    info = read_model_info(tiny_model)
    assert info.architecture == "llama"
    assert (info.n_layer, info.n_embd, info.n_head, info.n_head_kv) == (2, 64, 4, 2)
    assert info.n_ctx_train == 2048
    assert info.file_type == "F32"
    assert info.n_params > 100_000
    assert info.chat_template and "im_start" in info.chat_template
    assert (info.bos_token, info.eos_token, info.eos_token_id) == ("<s>", "<|im_end|>", IM_END_ID)
    assert info.has_encoder is False
    assert info.size_bytes == tiny_model.stat().st_size
    assert read_model_info(tiny_model).to_dict() == info.to_dict()


def test_loaded_model_agrees_with_header(tiny_model: Path) -> None:
    with Engine.open(tiny_model) as engine:
        assert engine.model is not None
        assert engine.model.n_vocab == read_model_info(tiny_model).n_vocab
        assert engine.model.is_eog(IM_END_ID)


def test_fingerprint_tells_same_shape_models_apart(tiny_model: Path, tiny_model_twin: Path) -> None:
    assert fingerprint(tiny_model) == fingerprint(tiny_model)
    assert fingerprint(tiny_model) != fingerprint(tiny_model_twin)


def test_progress_callback_and_cancel(tiny_model: Path) -> None:
    seen: list[float] = []

    def progress(fraction: float) -> bool:
        seen.append(fraction)
        return True

    with Engine.open(tiny_model, progress=progress) as _:
        pass
    assert seen and seen[-1] == pytest.approx(1.0)
    with pytest.raises(ModelLoadError, match="cancelled"):
        Engine.open(tiny_model, progress=lambda f: False)


EXPECTED = {
    "missing": "does not exist",
    "directory": "is a folder",
    "empty": "is empty",
    "random": "not a GGUF model file",
    "random_with_magic": "cannot read",
    "text": "not a GGUF model file",
    "magic_only": "damaged or truncated",
    "truncated_header": "damaged or truncated",
    "truncated_half": "is truncated: its tensors need",
    "truncated_last_byte": "truncated",
    "bad_version": "GGUF version 99",
    "huge_tensor_count": "damaged or truncated",
    "huge_kv_count": "damaged or truncated",
    "unknown_architecture": "architecture 'xllma'",
    "vocab_only": "only a vocabulary (no weights): it is a tokenizer file",
    "missing_tensor": "is missing",
    "zero_dimension": "zero dimension (64x0)",
    "huge_dimension": "huge dimension",
    "misaligned_offset": "not a multiple of the file's alignment (32)",
    "offset_past_end": "past the end of the file",
}


def test_broken_files_give_clear_errors(tmp_path: Path) -> None:
    corpus = write_corpus(tmp_path / "broken")
    assert set(corpus) == set(EXPECTED)
    for name, path in corpus.items():
        with pytest.raises(ModelLoadError) as info:
            Engine.open(path)
        message = str(info.value)
        assert EXPECTED[name] in message, (name, message)
        assert path.name in message, (name, message)
        assert "Traceback" not in message and len(message) < 300
        if path.is_file() and name != "missing_tensor":
            # The same sentence before llama.cpp is asked (inspect and the model manager
            # show it); only a missing weight needs llama.cpp's list of tensors to be found.
            with pytest.raises(ModelLoadError) as header_info:
                read_model_info(path)
            assert str(header_info.value) == message, name
    # The process is alive and still loads a good model afterwards.
    with Engine.open(tmp_path / "broken" / "_good.gguf") as engine:
        assert engine.model is not None
