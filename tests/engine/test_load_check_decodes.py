"""The first-load check runs the real load and the app's decode shapes (issue 27, item 1b).

A model that crashes llama.cpp with its extra CPU buffer types is loaded without them
(the user is told); one that crashes both ways is refused with a sentence. On this
project's CPU (a Xeon with AMX int8, where llama.cpp's AMX kernels crash) the real crash
stands behind ``LLAMADESK_AMX=on``; elsewhere the fault switch
``LLAMADESK_FAULT_EXTRA_BUFTS_CRASH`` makes the check's child die of SIGSEGV where it
starts decoding (``1``: only with extra buffer types; ``always``: in both tries).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import llama_cpp
import numpy as np
import pytest

from app.engine import ModelLoadError, cpu_quirks, load_check, load_check_runner
from app.engine.gguf_header import read_header
from app.engine.model import Model
from app.engine.settings import ModelSettings
from tests.support.gguf_models import TinySpec, write_tiny_model


@pytest.fixture(autouse=True)
def _fresh_checks() -> Iterator[None]:
    """No verdict from memory, and a warm helper started with this test's environment
    (it forks the checks: the fault switch must be in its environment)."""
    load_check.forget()
    load_check_runner.close_helper()
    yield
    load_check.forget()
    load_check_runner.close_helper()


def _decode_rows(model: Model, n_seq: int = 4) -> np.ndarray:
    """One token of each of ``n_seq`` sequences in one batch, a logits row each (the
    scheduler's batch: the shape that crashed AMX), on the model as the app loaded it."""
    cparams = llama_cpp.llama_context_default_params()
    cparams.n_ctx, cparams.n_batch, cparams.n_ubatch = 256, 64, 64
    cparams.n_seq_max = n_seq
    cparams.n_threads = cparams.n_threads_batch = 2
    ctx = llama_cpp.llama_init_from_model(model.handle, cparams)
    assert ctx
    batch = llama_cpp.llama_batch_init(n_seq, 0, n_seq)
    try:
        for i in range(n_seq):
            batch.token[i] = 3 + i
            batch.pos[i] = 0
            batch.n_seq_id[i] = 1
            batch.seq_id[i][0] = i
            batch.logits[i] = True
        batch.n_tokens = n_seq
        assert llama_cpp.llama_decode(ctx, batch) == 0
        rows = [
            np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(ctx, i), (model.n_vocab,)).copy()
            for i in range(n_seq)
        ]
        return np.stack(rows)
    finally:
        llama_cpp.llama_batch_free(batch)
        llama_cpp.llama_free(ctx)


def test_the_real_model_goes_through_the_check(smollm2: Path) -> None:
    header = read_header(smollm2)
    first = load_check.check(smollm2, header, architecture="llama")
    assert first.ok and first.source == "child" and first.extra_bufts, first
    assert first.notice == ""
    assert load_check.check(smollm2, header).source == "memory"
    load_check.forget()
    again = load_check.check(smollm2, header)
    assert again.source == "disk" and again.extra_bufts
    (entry,) = load_check.cache_dir().glob("*.json")
    assert json.loads(entry.read_text()) | {"checked_at": ""} == {
        "ok": True,
        "message": "",
        "extra_bufts": True,
        "file": smollm2.name,
        "checked_at": "",
    }


def test_another_guard_version_checks_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = write_tiny_model(tmp_path / "m.gguf", TinySpec(seed=21))
    header = read_header(model)
    assert load_check.check(model, header).source == "child"
    load_check.forget()
    assert load_check.check(model, header).source == "disk"
    load_check.forget()
    monkeypatch.setattr(cpu_quirks, "GUARD_VERSION", cpu_quirks.GUARD_VERSION + 1)
    load_check._machine_key.cache_clear()
    try:
        assert load_check.check(model, header).source == "child"
    finally:
        monkeypatch.undo()
        load_check._machine_key.cache_clear()


def test_a_crash_with_extra_buffer_types_loads_without_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(load_check.FAULT_ENV, "1")
    model = write_tiny_model(tmp_path / "crashy.gguf", TinySpec(seed=22))
    header = read_header(model)
    verdict = load_check.check(model, header, architecture="llama")
    assert verdict.ok and not verdict.extra_bufts and verdict.source == "child", verdict
    assert verdict.notice.startswith("crashy.gguf crashed llama.cpp with its faster CPU kernels")
    assert "--no-repack" in verdict.notice and verdict.notice.endswith("slower.")
    load_check.forget()
    kept = load_check.check(model, header)
    assert kept.source == "disk" and not kept.extra_bufts and kept.notice == verdict.notice
    # The app's load takes the verdict: no extra buffer types, and it says so.
    loaded = Model(model)
    try:
        assert loaded.load_notice == verdict.notice
        assert loaded._cpu_quirks is None
        assert np.isfinite(_decode_rows(loaded)).all()
    finally:
        loaded.close()


def test_a_model_that_crashes_both_ways_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(load_check.FAULT_ENV, "always")
    model = write_tiny_model(tmp_path / "broken.gguf", TinySpec(seed=23))
    verdict = load_check.check(model, read_header(model))
    assert not verdict.ok and verdict.source == "child"
    assert verdict.message == (
        "LlamaDesk did not load broken.gguf: llama.cpp crashes (SIGSEGV) when it runs this "
        "model on this computer, also without its faster CPU kernels."
    )
    load_check.forget()
    with pytest.raises(ModelLoadError) as caught:
        Model(model)
    assert str(caught.value) == verdict.message


def test_safe_settings_try_only_without_extra_buffer_types(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(load_check.FAULT_ENV, "1")  # would crash the first of two tries
    model = write_tiny_model(tmp_path / "safe.gguf", TinySpec(seed=24))
    loaded = Model(model, ModelSettings(use_extra_bufts=False))
    try:
        # One try, the safe one: nothing crashed, so there is nothing to tell.
        assert loaded.load_notice == "" and loaded._cpu_quirks is None
        assert np.isfinite(_decode_rows(loaded)).all()
    finally:
        loaded.close()
    # The same file and placement as that load's (the verdict is kept for these).
    placement = load_check.placement_of(ModelSettings(use_extra_bufts=False))
    verdict = load_check.check(model, read_header(model), extra_bufts=False, placement=placement)
    assert verdict.ok and verdict.source == "memory"


amx_machine = pytest.mark.skipif(
    not (cpu_quirks.cpu_identity().has_amx_int8 and cpu_quirks.cpu_buffer_types().amx),
    reason="needs a CPU with AMX int8 and llama.cpp's AMX buffer type",
)


@amx_machine
def test_the_real_amx_crash_on_the_real_model_falls_back(
    smollm2: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """LLAMADESK_AMX=on turns the AMX guard off: the tied Q8_0 output matrix then goes to
    AMX, and a batch with several logits rows crashes the check's child if this CPU is
    affected (verdict "crashes" of the AMX probe). The check falls back, and the app's load
    in this very process decodes that batch without dying."""
    if cpu_quirks.amx_verdict(cpu_quirks.cpu_identity()) is not cpu_quirks.Verdict.CRASHES:
        pytest.skip("llama.cpp's AMX kernels work on this CPU")
    monkeypatch.setenv(cpu_quirks.AMX_ENV, "on")
    verdict = load_check.check(smollm2, read_header(smollm2), architecture="llama")
    assert verdict.ok and not verdict.extra_bufts, verdict
    loaded = Model(smollm2)
    try:
        assert loaded.load_notice == verdict.notice != ""
        assert np.isfinite(_decode_rows(loaded)).all()
    finally:
        loaded.close()
