from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from app.engine import Engine
from tests.support.settings import small_settings


@pytest.fixture
def engine(tiny_model: Path) -> Iterator[Engine]:
    with Engine.open(tiny_model, small_settings()) as e:
        yield e
