"""The tool tests' loaded tiny model (the grammar tests tokenize and sample with it)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import llama_cpp
import pytest


@pytest.fixture(scope="module")
def model(tiny_model: Path) -> Iterator[llama_cpp.llama_model_p]:
    handle = llama_cpp.llama_model_load_from_file(
        str(tiny_model).encode(), llama_cpp.llama_model_default_params()
    )
    assert handle
    yield handle
    llama_cpp.llama_model_free(handle)
