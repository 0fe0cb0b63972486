"""Cases found in review: each once crashed the process, hung, or lost track of the cache."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.engine import Engine, SamplingParams, StateError
from app.engine.context import Context
from app.engine.state_file import _FIXED, MAGIC, VERSION, SequenceState, _digest
from tests.support.gguf_models import write_tiny_t5
from tests.support.settings import small_settings

PROMPT = [1] + [300 + i % 40 for i in range(40)]


def test_abort_in_a_later_micro_batch_does_not_hang(tiny_model: Path) -> None:
    with Engine.open(tiny_model, small_settings(n_batch=64, n_ubatch=16)) as engine:
        gen, pre = engine.open_sequence(), engine.open_sequence()
        engine.set_tokens(gen, [1, 300, 301, 302])
        engine.start(gen, SamplingParams(temperature=0, max_tokens=30))
        for _ in range(3):
            engine.step()
        engine.set_tokens(pre, [1] + [300 + i % 40 for i in range(100)])
        engine.prefill(pre)
        ctx = engine.context
        assert ctx is not None
        pre_seq = engine._seqs[pre]

        class AbortInSecondMicroBatch(Context):
            @property
            def abort_requested(self) -> bool:
                return pre_seq.seq_id is not None and self.seq_pos_max(pre_seq.seq_id) >= 16

            @abort_requested.setter
            def abort_requested(self, value: bool) -> None:
                pass

        ctx.__class__ = AbortInSecondMicroBatch
        engine.step()
        ctx.__class__ = Context
        ctx.abort_requested = False
        for _ in range(200):
            if not engine.has_work():
                break
            engine.step()
        assert not engine.has_work(), "a sequence stayed busy without making progress"
        assert engine.tokens(pre) == [1] + [300 + i % 40 for i in range(100)]


def test_encoder_decoder_continues_after_a_context_rebuild(tmp_path: Path) -> None:
    model = write_tiny_t5(tmp_path / "t5.gguf", seed=2)
    with Engine.open(model, small_settings()) as engine:
        key = engine.open_sequence()
        engine.set_prompt(key, "hello world the model")
        engine.complete(key, SamplingParams(temperature=0, max_tokens=3))
        engine.reconfigure(small_settings(n_ctx=512))
        engine.append_text(key, " and")
        assert (
            engine.complete(key, SamplingParams(temperature=0, max_tokens=3)).finish_reason
            == "length"
        )


def test_non_causal_batches_fit_one_micro_batch(tiny_model: Path) -> None:
    with Engine.open(
        tiny_model, small_settings(attention_type="non-causal", n_batch=64, n_ubatch=16)
    ) as engine:
        key = engine.open_sequence()
        engine.set_tokens(key, PROMPT)
        engine.prefill(key)
        engine.run_until_done(key)
        assert engine.tokens(key) == PROMPT


def test_restore_into_a_parked_sequence_forgets_an_old_cut(tiny_model: Path) -> None:
    with Engine.open(tiny_model, small_settings(n_seq_max=1)) as engine:
        a, b = engine.open_sequence(), engine.open_sequence()
        engine.set_tokens(a, PROMPT)
        engine.prefill(a)
        engine.run_until_done(a)
        engine.append_tokens(a, [320])
        saved = engine.save_state(a)
        engine.set_tokens(b, [1, 310, 311])
        engine.start(b, SamplingParams(temperature=0, max_tokens=20))
        engine.step()  # b takes the only slot; a is parked
        engine.set_tokens(a, [*PROMPT[:5], 330, 331])  # an edit while parked
        assert engine.restore_state(a, saved)
        engine.run_until_done(b)
        engine.prefill(a)
        engine.run_until_done(a)
        assert engine.tokens(a) == [*PROMPT, 320]


def test_rebuild_reprocesses_a_cut_parked_sequence_from_its_new_text(tiny_model: Path) -> None:
    with Engine.open(tiny_model, small_settings(n_seq_max=1)) as engine:
        a, b = engine.open_sequence(), engine.open_sequence()
        engine.set_tokens(a, PROMPT)
        engine.prefill(a)
        engine.run_until_done(a)
        engine.set_tokens(b, [1, 310, 311])
        engine.prefill(b)
        engine.run_until_done(b)
        engine.set_tokens(a, [*PROMPT[:5], 330, 331])
        engine.reconfigure(small_settings(n_seq_max=1, type_k="f32"))
        assert engine.tokens(a) + engine.pending_tokens(a) == [*PROMPT[:5], 330, 331]


def _pack(header: object = None, raw: bytes | None = None, blob: bytes = b"") -> bytes:
    raw = json.dumps(header).encode() if raw is None else raw
    return _FIXED.pack(MAGIC, VERSION, len(raw), _digest(raw)) + raw + blob


def test_crafted_state_headers_are_refused_with_a_sentence(engine: Engine) -> None:
    good = {
        "model_fingerprint": engine.model_fingerprint,
        "layout": engine._layout(),
        "tokens": [1, 300],
        "pending": [],
        "n_keep": 0,
        "blob_size": 0,
        "blob_hash": _digest(b"").hex(),
        "extra": {},
    }
    cases = [
        _pack([]),
        _pack({k: v for k, v in good.items() if k != "blob_size"}),
        _pack(raw=b"[" * 100000 + b"]" * 100000),
        _pack({**good, "pending": "ab"}),
        _pack({**good, "n_keep": "x"}),
        _pack({**good, "n_keep": -5}),
        _pack({**good, "extra": {"n_dropped": -1}}),
        _pack({**good, "layout": "abc"}),
    ]
    key = engine.open_sequence()
    for data in cases:
        with pytest.raises(StateError):
            SequenceState.from_bytes(data)
        assert engine.restore_state(key, data) is False
        assert engine.last_restore_error
    # Well-formed, but with token ids this vocabulary does not have.
    assert engine.restore_state(key, _pack({**good, "tokens": [10**30]})) is False
    assert engine.last_restore_error and "vocabulary" in engine.last_restore_error


def test_crafted_whole_context_states_leave_the_engine_intact(engine: Engine) -> None:
    key = engine.open_sequence()
    engine.set_tokens(key, [1, 300, 301])
    engine.prefill(key)
    engine.run_until_done(key)
    state = SequenceState.from_bytes(engine.save_context_state())
    broken: list[dict[str, dict[str, object]]] = [
        {"1": {}},
        {"1": {"seq_id": 7, "tokens": [1, 300, 301], "pending": [], "n_keep": 0}},
        {
            "1": {"seq_id": 0, "tokens": [1, 300, 301], "pending": [], "n_keep": 0},
            "2": {"seq_id": 0, "tokens": [1], "pending": [5], "n_keep": 0},
        },
    ]
    for sequences in broken:
        state.extra = {"sequences": sequences}
        with pytest.raises(StateError):
            engine.restore_context_state(state.to_bytes())
        assert engine.tokens(key) == [1, 300, 301]  # nothing was closed


def test_errors_from_bad_arguments_are_sentences(engine: Engine, tmp_path: Path) -> None:
    from app.engine import EngineError

    key = engine.open_sequence()
    with pytest.raises(EngineError, match="vocabulary"):
        engine.set_tokens(key, ["a"])  # type: ignore[list-item]
    assert engine.tokenize("lone \ud800 surrogate")
    engine.set_prompt(key, "hello")
    engine.prefill(key)
    engine.run_until_done(key)
    with pytest.raises(StateError, match="cannot be written"):
        engine.save_state_file(key, "/proc/nonexistent/dir/state.bin")


def test_detokenizing_an_id_outside_the_vocabulary_is_a_sentence(engine: Engine) -> None:
    # llama_token_to_piece aborts the process on it (found through the API's /detokenize).
    from app.engine import EngineError

    with pytest.raises(EngineError, match="not in this model's vocabulary"):
        engine.detokenize([1, 10**9])
    with pytest.raises(EngineError, match="not in this model's vocabulary"):
        engine.detokenize([-5])
