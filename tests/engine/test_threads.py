"""Staying off the CPU cliff (issue 20, item 2): the batching choice measured per context
and pinned in tests, thread-count warnings, and libgomp's spin setting."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from app.engine import Engine, SamplingParams
from app.engine.batching import BatchMode
from app.engine.threads import APP_SPINCOUNT, clamp_threads, configure_openmp, thread_warnings
from tests.support.settings import small_settings


def test_the_choice_is_measured_once_per_context_and_said(tiny_model: Path) -> None:
    with Engine.open(tiny_model, small_settings()) as engine:
        choice = engine.batching
        assert not choice.pinned
        assert choice.batch_of_two_ms > 0 and choice.one_by_one_ms > 0
        assert choice.n_threads == 1
        assert "ms" in choice.reason and "1 thread" in choice.reason
        assert choice.to_dict()["mode"] in ("batched", "turns")
        # The measurement leaves nothing in the cache: a new sequence starts empty.
        key = engine.open_sequence()
        engine.set_prompt(key, "hello")
        assert engine.complete(key, SamplingParams(temperature=0, max_tokens=4)).n_sampled


def test_single_sequence_contexts_do_not_measure(tiny_model: Path) -> None:
    with Engine.open(tiny_model, small_settings(n_seq_max=1)) as engine:
        assert engine.batching.mode is BatchMode.BATCHED
        assert engine.batching.batch_of_two_ms == 0


def _run_two(engine: Engine, n: int) -> tuple[list[list[int]], list[set[int]]]:
    keys = [engine.open_sequence() for _ in range(2)]
    params = SamplingParams(temperature=0, max_tokens=n)
    for key, text in zip(keys, ("hello world", "the model"), strict=True):
        engine.set_prompt(key, text)
        engine.start(key, params)
    per_step: list[set[int]] = []

    def sampled() -> list[int]:
        return [engine._seqs[k].completion.n_sampled for k in keys]

    while engine.has_work():
        before = sampled()
        engine.step()
        grew = {k for k, b, a in zip(keys, before, sampled(), strict=True) if a > b}
        if grew:
            per_step.append(grew)
    return [engine.tokens(k) for k in keys], per_step


def test_pinned_turns_decode_one_generating_tab_per_step(tiny_model: Path) -> None:
    with Engine.open(tiny_model, small_settings()) as engine:
        engine.pin_batching(BatchMode.BATCHED)
        batched, steps_batched = _run_two(engine, 6)
        assert any(len(s) == 2 for s in steps_batched), "both tabs in one decode"
    with Engine.open(tiny_model, small_settings()) as engine:
        engine.pin_batching(BatchMode.TURNS)
        assert engine.batching.pinned and engine.batching.mode is BatchMode.TURNS
        turns, steps_turns = _run_two(engine, 6)
        # After the prompts (whose step samples both first tokens), a step gives one tab
        # its token, the tabs alternating.
        later = steps_turns[1:]
        assert later and all(len(s) == 1 for s in later)
        assert len({k for s in later for k in s}) == 2
    # A random tiny model gives the same greedy tokens either way (real models may differ
    # in the last bits: DESIGN.md section 7).
    assert turns == batched


def test_a_pin_survives_a_rebuild(tiny_model: Path) -> None:
    with Engine.open(tiny_model, small_settings()) as engine:
        engine.pin_batching(BatchMode.TURNS)
        engine.reconfigure(small_settings(n_ctx=2048))
        assert engine.batching.mode is BatchMode.TURNS and engine.batching.pinned


def test_thread_warnings() -> None:
    (note,) = thread_warnings(2, 2, cores=2)
    assert "2 generation threads" in note and "1 (all cores but one)" in note
    assert thread_warnings(1, 2, cores=2) == []
    assert thread_warnings(1, 1, cores=1) == [], "one core: nothing better to suggest"
    (batch_note,) = thread_warnings(1, 4, cores=2)
    assert "4 prompt threads" in batch_note
    assert clamp_threads(0) == (1, "A thread count of 0 is not possible: 1 thread is used.")
    assert clamp_threads(3) == (3, None)


def test_configure_openmp_respects_the_user(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "LLAMADESK_OMP_DEFAULTS"):
        monkeypatch.delenv(name, raising=False)
    configure_openmp()
    assert os.environ["GOMP_SPINCOUNT"] == str(APP_SPINCOUNT)
    monkeypatch.setenv("GOMP_SPINCOUNT", "5")
    configure_openmp()
    assert os.environ["GOMP_SPINCOUNT"] == "5"
    monkeypatch.delenv("GOMP_SPINCOUNT")
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    configure_openmp()
    assert "GOMP_SPINCOUNT" not in os.environ


def test_run_warns_before_oversubscribing(tiny_model: Path) -> None:
    cores = len(os.sched_getaffinity(0))
    if cores < 2:
        pytest.skip("needs two cores")
    done = subprocess.run(
        [sys.executable, "-m", "app", "run", str(tiny_model), "hi", "-n", "2", "-t", str(cores)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert f"warning: {cores} generation threads" in done.stderr
