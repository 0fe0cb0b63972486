"""A quantized tied-embedding variant of every family's tiny model loads and decodes a
batch with several logits rows (issue 27): the shape that crashed llama.cpp's AMX kernels
on SmolLM2 and Gemma 3, whose Q8_0 embedding is their output matrix too.

Each goes through the app's first-load check (its child decodes a prompt chunk, 4
sequences' tokens with a logits row each, and one token) and then through the app's own
load in this process (the CPU guard applied), where the test decodes 4 sequences' tokens
with a logits row each; a crash there fails the run.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from app.engine import load_check, load_check_runner
from app.engine.gguf_header import read_header
from app.engine.model import Model
from tests.engine.test_load_check_decodes import _decode_rows
from tests.support.arch_models import ARCHITECTURES
from tests.support.tied_models import GGML_TYPE_Q8_0, NEEDS_OUTPUT, write_tied_quantized


@pytest.fixture(autouse=True)
def _fresh_checks() -> Iterator[None]:
    load_check.forget()
    load_check_runner.close_helper()  # started with this test's environment
    yield
    load_check_runner.close_helper()


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_a_tied_quantized_model_loads_and_decodes_several_rows(arch: str, tmp_path: Path) -> None:
    path = write_tied_quantized(tmp_path, arch)
    header = read_header(path)
    types = {t.name: t.ggml_type for t in header.tensors}
    assert types["token_embd.weight"] == GGML_TYPE_Q8_0
    # gpt-oss and rwkv7 cannot be tied in llama.cpp (their tied files are refused: below).
    assert ("output.weight" in types) == (arch in NEEDS_OUTPUT)
    verdict = load_check.check(path, header, architecture=arch)
    assert verdict.ok and verdict.source == "child" and verdict.extra_bufts, verdict
    model = Model(path)
    try:
        assert model.load_notice == ""
        rows = _decode_rows(model)
        assert rows.shape == (4, model.n_vocab) and np.isfinite(rows).all()
        # Four sequences, four tokens: four different rows (each row is its own sequence's).
        assert len({row.tobytes() for row in rows}) == 4
    finally:
        model.close()


@pytest.mark.parametrize("arch", sorted(NEEDS_OUTPUT))
def test_a_tied_file_of_a_family_that_needs_its_output_matrix_is_refused(
    arch: str, tmp_path: Path
) -> None:
    path = write_tied_quantized(tmp_path, arch, tied=True)
    verdict = load_check.check(path, read_header(path), architecture=arch)
    assert not verdict.ok and verdict.message == (
        f"{path.name} is incomplete or damaged: the weight 'output.weight' is missing. "
        "Download or copy it again."
    )
