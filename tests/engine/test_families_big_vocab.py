"""The family behaviours again with a real-sized vocabulary (152k tokens, Qwen2-like BPE).

Tiny vocabularies hide costs and quirks real ones have: 600 KB of logits kept per checkpoint,
byte-level BPE splitting a reply's text another way than it was sampled. One architecture
per cache family.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from app.engine import Engine
from tests.engine.test_families import _open, exercise_chat_features
from tests.support.arch_models import write_arch_model

FAMILY_REPRESENTATIVES = ("llama", "gemma3", "qwen35", "mamba2")


@pytest.fixture(scope="module", params=FAMILY_REPRESENTATIVES)
def big_engine(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Engine]:
    arch = str(request.param)
    path = write_arch_model(
        tmp_path_factory.mktemp("big") / f"{arch}.gguf", arch, vocab="qwen2-152k"
    )
    with _open(path) as engine:
        yield engine


def test_real_vocabulary_is_loaded(big_engine: Engine) -> None:
    assert big_engine.model is not None and big_engine.model.n_vocab == 151_936


def test_regenerate_edit_fork_and_reopen(big_engine: Engine) -> None:
    exercise_chat_features(big_engine)
