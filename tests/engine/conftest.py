from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from app.engine import ContextSettings, Engine


def small_settings(**overrides: object) -> ContextSettings:
    values: dict[str, object] = dict(
        n_ctx=1024, n_batch=64, n_ubatch=64, n_seq_max=4, n_threads=2, n_threads_batch=2
    )
    values.update(overrides)
    return ContextSettings(**values)  # type: ignore[arg-type]


@pytest.fixture
def engine(tiny_model: Path) -> Iterator[Engine]:
    with Engine.open(tiny_model, small_settings()) as e:
        yield e
