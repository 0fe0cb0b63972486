"""A sequence's phase: the named transitions, and what the engine does with them."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from app.engine import Engine, EngineError, Evicted, SamplingParams
from app.engine.events import Completion
from app.engine.output import ReplyStream
from app.engine.reasoning import ReasoningFormat
from app.engine.sequence import Phase, Sequence
from tests.support.settings import small_settings


def _phase(seq: Sequence) -> Phase:
    """The phase now, read through a call: mypy keeps an earlier assert's narrowing of
    ``seq.phase`` past the method calls that change it."""
    return seq.phase


GREEDY = SamplingParams(temperature=0.0, max_tokens=8)
PROMPT = "hello world the model is a llama . what is my name ? one two three"


def _with_reply(seq: Sequence) -> Sequence:
    seq.reply = ReplyStream(seq.key, Completion(), [], ReasoningFormat.NONE, False)
    return seq


def test_a_turn_goes_through_prefill_to_generation_and_back() -> None:
    seq = _with_reply(Sequence(1))
    assert _phase(seq) is Phase.IDLE and not seq.busy
    seq.begin_generation()
    assert _phase(seq) is Phase.PREFILLING_TO_GENERATE
    assert (seq.busy, seq.want_generation, seq.generating, seq.want_logits) == (
        True,
        True,
        False,
        False,
    )
    seq.first_token(12.5)
    assert _phase(seq) is Phase.GENERATING and seq.generating and seq.want_generation
    assert seq.reply is not None and seq.reply.t_start == 12.5
    seq.finish()
    assert _phase(seq) is Phase.IDLE and not seq.busy


@pytest.mark.parametrize("keep_logits", [False, True])
def test_a_prefill_ends_idle(keep_logits: bool) -> None:
    seq = Sequence(1)
    seq.stop_requested = True  # left over from an earlier turn: a new one starts clean
    seq.begin_prefill(keep_logits)
    assert not seq.stop_requested
    assert _phase(seq) is (Phase.PREFILLING_FOR_LOGITS if keep_logits else Phase.PREFILLING)
    assert seq.want_logits is keep_logits and not seq.want_generation
    seq.prefill_done()
    assert _phase(seq) is Phase.IDLE


def test_transitions_that_do_not_exist_are_refused() -> None:
    seq = _with_reply(Sequence(1))
    with pytest.raises(EngineError):
        seq.first_token(0.0)  # nothing was started
    with pytest.raises(EngineError):
        seq.prefill_done()
    seq.begin_prefill(False)
    with pytest.raises(EngineError):
        seq.begin_generation()  # busy: start() refuses before this, the table too
    with pytest.raises(EngineError):
        seq.first_token(0.0)  # a prefill never samples
    assert _phase(seq) is Phase.PREFILLING


@pytest.mark.parametrize(
    "phase", [Phase.PREFILLING, Phase.PREFILLING_FOR_LOGITS, Phase.PREFILLING_TO_GENERATE]
)
def test_finish_ends_any_phase_and_clears_a_stop_request(phase: Phase) -> None:
    seq = Sequence(1, phase=phase, stop_requested=True)
    seq.finish()
    assert _phase(seq) is Phase.IDLE and not seq.stop_requested


def test_the_engine_moves_a_sequence_through_its_phases(engine: Engine) -> None:
    key = engine.open_sequence()
    engine.set_prompt(key, PROMPT)
    seq = engine._seqs[key]
    engine.start(key, GREEDY)
    assert _phase(seq) is Phase.PREFILLING_TO_GENERATE
    seen = set()
    while engine.is_busy(key):
        engine.step()
        seen.add(seq.phase)
    assert Phase.GENERATING in seen and _phase(seq) is Phase.IDLE
    assert seq.completion.finish_reason in ("eog", "length") and seq.reply is None
    engine.set_prompt(key, PROMPT + " four")
    engine.prefill(key, logits=True)
    assert _phase(seq) is Phase.PREFILLING_FOR_LOGITS
    engine.run_until_done(key)
    assert _phase(seq) is Phase.IDLE and seq.last_logits is not None


def test_a_stop_from_another_thread_becomes_a_transition_at_the_next_step(
    engine: Engine,
) -> None:
    key = engine.open_sequence()
    engine.set_prompt(key, PROMPT)
    engine.start(key, SamplingParams(temperature=0.0, max_tokens=200))
    engine.step()
    engine.step()
    stopper = threading.Thread(target=engine.stop, args=(key,))
    stopper.start()
    stopper.join()
    seq = engine._seqs[key]
    assert seq.stop_requested and _phase(seq) is not Phase.IDLE  # only a flag so far
    engine.step()
    assert _phase(seq) is Phase.IDLE and not seq.stop_requested
    assert seq.completion.finish_reason == "aborted"
    engine.stop(key)  # an idle sequence: nothing to stop, nothing left behind
    assert not seq.stop_requested


def test_a_new_model_does_not_report_the_old_ones_evictions(tiny_model: Path) -> None:
    with Engine.open(tiny_model, small_settings(n_seq_max=1)) as engine:
        first, second = engine.open_sequence(), engine.open_sequence()
        engine.set_prompt(first, "hello")
        engine.next_logits(first)  # the first holds the only slot
        engine.set_prompt(second, PROMPT)
        engine.keep_only(second)  # takes the only slot: the first is evicted
        engine.load_model(tiny_model)
        engine.create_context(small_settings(n_seq_max=1))
        assert not any(isinstance(e, Evicted) for e in engine.step())


def test_an_unreadable_state_file_says_why(engine: Engine, tmp_path: Path) -> None:
    key = engine.open_sequence()
    assert not engine.restore_state(key, b"not a state")
    assert not engine.restore_state_file(key, tmp_path / "missing.state")
    assert engine.last_restore_error is not None
    assert "cannot be read" in engine.last_restore_error
