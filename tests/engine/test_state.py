"""Forks, state files, and everything a state file must be refused for."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from app.engine import Engine, SamplingParams, SequenceState
from tests.support.settings import small_settings

GREEDY = SamplingParams(temperature=0.0, max_tokens=16)
PROMPT = "hello world the model is a llama . what is my name ? one two three"


def _close(a: np.ndarray, b: np.ndarray) -> None:
    assert int(np.argmax(a)) == int(np.argmax(b))
    np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-3)


def test_fork_has_same_next_logits_without_recompute(engine: Engine) -> None:
    src = engine.open_sequence()
    engine.set_prompt(src, PROMPT)
    engine.prefill(src)
    engine.run_until_done(src)
    n = len(engine.tokens(src))
    dst = engine.fork(src)
    assert engine.tokens(dst) == engine.tokens(src)
    assert engine.pending_tokens(dst) == []  # nothing to re-process
    _close(engine.next_logits(dst), engine.next_logits(src))
    # A fork of a prefix continues like a fresh sequence with that prefix. Shared prefix vs
    # a fresh run: the fork holds the source's cells, the fresh sequence decodes the prefix
    # whole (another chunking, other cells), so the logits are compared within a tolerance.
    part = engine.fork(src, n // 2)
    assert len(engine.tokens(part)) == n // 2
    fresh = engine.open_sequence()
    engine.set_tokens(fresh, engine.tokens(src)[: n // 2])
    _close(engine.next_logits(part), engine.next_logits(fresh))


def test_fork_generates_same_continuation(engine: Engine) -> None:
    src = engine.open_sequence()
    engine.set_prompt(src, PROMPT)
    engine.prefill(src)
    engine.run_until_done(src)
    dst = engine.fork(src)
    a = engine.complete(src, GREEDY).tokens
    b = engine.complete(dst, GREEDY).tokens
    assert a == b


def test_save_remove_restore_into_another_id(engine: Engine, tmp_path: Path) -> None:
    key = engine.open_sequence()
    engine.set_prompt(key, PROMPT)
    engine.prefill(key)
    engine.run_until_done(key)
    before = engine.next_logits(key)
    path = tmp_path / "seq.state"
    engine.save_state_file(key, path)
    seq_id_before = engine._seqs[key].seq_id
    expected = engine.complete(key, GREEDY).tokens
    engine.close_sequence(key)
    # Occupy the old slot so the restore lands in another seq_id.
    blocker = engine.open_sequence()
    engine.set_prompt(blocker, "one two")
    engine.prefill(blocker)
    engine.run_until_done(blocker)
    other = engine.open_sequence()
    assert engine.restore_state_file(other, path) is True
    assert engine._seqs[other].seq_id != seq_id_before
    assert engine.pending_tokens(other) == []
    # The same cells' data in another place of a unified cache: logits within a tolerance
    # (DESIGN.md 3); the tokens are identical on this tiny model (same chunking after it).
    _close(engine.next_logits(other), before)
    assert engine.complete(other, GREEDY).tokens == expected


def test_session_resume_equals_one_run(engine: Engine, tmp_path: Path) -> None:
    key = engine.open_sequence()
    engine.set_prompt(key, PROMPT)
    one_run = engine.complete(key, SamplingParams(temperature=0, max_tokens=32)).tokens
    engine.close_sequence(key)
    first = engine.open_sequence()
    engine.set_prompt(first, PROMPT)
    part1 = engine.complete(first, GREEDY).tokens
    engine.save_state_file(first, tmp_path / "s")
    engine.close_sequence(first)
    second = engine.open_sequence()
    assert engine.restore_state_file(second, tmp_path / "s")
    part2 = engine.complete(second, GREEDY).tokens
    assert part1 + part2 == one_run


def _saved(engine: Engine) -> bytes:
    key = engine.open_sequence()
    engine.set_prompt(key, PROMPT)
    engine.prefill(key)
    engine.run_until_done(key)
    data = engine.save_state(key)
    engine.close_sequence(key)
    return data


def test_refuses_truncated_and_bit_flipped_states(engine: Engine) -> None:
    data = _saved(engine)
    key = engine.open_sequence()
    for bad in (data[:10], data[: len(data) // 2], data[:-1]):
        assert engine.restore_state(key, bad) is False
    flipped = bytearray(data)
    flipped[len(data) - 100] ^= 0x01  # inside the KV data
    assert engine.restore_state(key, bytes(flipped)) is False
    with pytest.raises(Exception, match="damaged"):
        SequenceState.from_bytes(bytes(flipped))
    header_flip = bytearray(data)
    header_flip[40] ^= 0x20  # inside the JSON header
    assert engine.restore_state(key, bytes(header_flip)) is False
    # The engine is still healthy and the good file still restores.
    assert engine.restore_state(key, data) is True


def test_refused_blob_from_same_model_falls_back_to_reprocessing(tiny_model: Path) -> None:
    with Engine.open(tiny_model, small_settings(type_k="f16")) as a:
        data = _saved(a)
        tokens = SequenceState.from_bytes(data).tokens
    with Engine.open(tiny_model, small_settings(type_k="f32")) as b:
        key = b.open_sequence()
        assert b.restore_state(key, data) is False  # other KV type
        assert b.tokens(key) == []
        assert b.pending_tokens(key) == tokens  # the text is re-processed instead
        b.prefill(key)
        b.run_until_done(key)
        assert b.tokens(key) == tokens


def test_refuses_state_of_another_model_with_same_shape(
    engine: Engine, tiny_model_twin: Path
) -> None:
    data = _saved(engine)
    with Engine.open(tiny_model_twin, small_settings()) as twin:
        key = twin.open_sequence()
        assert twin.restore_state(key, data) is False
        assert twin.tokens(key) == [] and twin.pending_tokens(key) == []


def test_eviction_parks_and_restores(tiny_model: Path) -> None:
    with Engine.open(tiny_model, small_settings(n_seq_max=2)) as engine:
        keys = [engine.open_sequence() for _ in range(3)]
        held = {}
        for i, key in enumerate(keys):
            engine.set_prompt(key, f"{PROMPT} {i}")
            engine.prefill(key)
            engine.run_until_done(key)
            held[key] = engine.tokens(key)
        # Only two slots: the first sequence was evicted into a parked state.
        assert engine.info(keys[0]).resident is False
        assert engine.parked_state(keys[0]) is not None
        before = engine.info(keys[0]).n_tokens
        engine.start(keys[0], GREEDY)  # comes back from its state, no re-processing
        while engine.has_work():
            engine.step()
        assert engine.info(keys[0]).resident
        assert engine.tokens(keys[0])[: before - 1] == held[keys[0]][: before - 1]
        assert engine.run_until_done(keys[0]).n_prompt_processed <= 1


def test_reconfigure_keeps_sequences(engine: Engine) -> None:
    key = engine.open_sequence()
    engine.set_prompt(key, PROMPT)
    engine.prefill(key)
    engine.run_until_done(key)
    logits = engine.next_logits(key)
    tokens = engine.tokens(key)
    engine.reconfigure(small_settings(n_ctx=2048, n_batch=128, n_ubatch=128))
    assert engine.context is not None and engine.context.n_ctx == 2048
    assert engine.tokens(key) == tokens  # restored from its state, nothing to re-process
    assert engine.pending_tokens(key) == []
    _close(engine.next_logits(key), logits)
    engine.reconfigure(small_settings(n_ctx=2048, n_batch=128, n_ubatch=128, type_k="f32"))
    assert engine.tokens(key) == []  # the layout changed: re-processed from text
    _close(engine.next_logits(key), logits)


def test_threads_change_live(engine: Engine) -> None:
    handle = engine.context.handle if engine.context else None
    engine.set_threads(1, 1)
    assert engine.context is not None and engine.context.handle == handle
    assert engine.settings.n_threads == 1


def test_whole_context_save_restore(engine: Engine) -> None:
    a, b = engine.open_sequence(), engine.open_sequence()
    engine.set_prompt(a, PROMPT)
    engine.set_prompt(b, "one two three")
    for k in (a, b):
        engine.prefill(k)
    while engine.has_work():
        engine.step()
    logits_a = engine.next_logits(a)
    blob = engine.save_context_state()
    for k in (a, b):
        engine.close_sequence(k)
    keys = engine.restore_context_state(blob)
    assert len(keys) == 2
    restored = next(k for k in keys if len(engine.tokens(k)) > 5)
    _close(engine.next_logits(restored), logits_a)


def test_refusal_reason_is_kept(engine: Engine, tiny_model_twin: Path) -> None:
    data = _saved(engine)
    key = engine.open_sequence()
    assert engine.restore_state(key, data[:-5]) is False
    assert engine.last_restore_error and "truncated" in engine.last_restore_error
    assert engine.restore_state(key, data) is True
    assert engine.last_restore_error is None
    with Engine.open(tiny_model_twin, small_settings()) as twin:
        k = twin.open_sequence()
        assert twin.restore_state(k, data) is False
        assert twin.last_restore_error and "another model" in twin.last_restore_error


def test_restore_makes_room_by_parking_idle_sequences(tiny_model: Path) -> None:
    with Engine.open(tiny_model, small_settings(n_ctx=512, n_seq_max=4)) as engine:
        first = engine.open_sequence()
        engine.set_tokens(first, [1] + [300] * 300)
        engine.prefill(first)
        engine.run_until_done(first)
        saved = engine.save_state(first)
        idle = engine.open_sequence()
        engine.set_tokens(idle, [1] + [301] * 300)
        engine.prefill(idle)
        engine.run_until_done(idle)
        engine.close_sequence(first)
        target = engine.open_sequence()
        # 301 + 301 cells do not fit in 512: the idle sequence is parked, not the restore refused.
        assert engine.restore_state(target, saved) is True
        assert engine.pending_tokens(target) == []
        assert engine.info(idle).resident is False
        assert engine.parked_state(idle) is not None
