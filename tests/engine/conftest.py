from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import gguf
import pytest

from app.engine import Engine
from tests.support.arch_models import ARCHITECTURES, SmallVocab, write_arch_model
from tests.support.gguf_models import vocabulary
from tests.support.settings import small_settings


@pytest.fixture
def engine(tiny_model: Path) -> Iterator[Engine]:
    with Engine.open(tiny_model, small_settings()) as e:
        yield e


class _PlainSpaces(SmallVocab):
    """The small vocabulary without SentencePiece's space prefix, as byte-level BPE vocabularies
    are: a reply's text then tokenizes into the next prompt as it was sampled, so the tests can
    count exactly what a turn decodes."""

    def add_to_writer(self, writer: gguf.GGUFWriter) -> None:
        super().add_to_writer(writer)
        writer.add_add_space_prefix(False)


@pytest.fixture(scope="session")
def family_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One tiny model of every architecture (tests/engine/test_families.py and others)."""
    folder = tmp_path_factory.mktemp("family-models")
    vocab = _PlainSpaces(*vocabulary())
    return {
        arch: write_arch_model(folder / f"{arch}.gguf", arch, vocab=vocab) for arch in ARCHITECTURES
    }
