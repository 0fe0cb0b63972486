"""Restoring saved caches into a context with less room than they need, on one model of each
cache family: the outcome says what really happened, llama.cpp is never asked to restore
what cannot fit, and every reply equals the one the uninterrupted conversation gives.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from app.engine import (
    ContextSettings,
    Engine,
    Event,
    Evicted,
    RestoreOutcome,
    SamplingParams,
    StateRestored,
)
from app.engine.cache import CacheFamily
from tests.engine.test_families import SYSTEM, WORDS, _open

GREEDY = SamplingParams(temperature=0, max_tokens=8, grammar=WORDS)
ONE_OF_EACH = [
    "llama",
    "gemma3",
    "qwen35",
    "mamba2",
]  # attention, sliding window, hybrid, recurrent


def _prompt(i: int) -> list[int]:
    """BOS and 150 word tokens, different per conversation."""
    return [1] + [270 + (i * 7 + j * 3) % 40 for j in range(150)]


def _count_failed_restores(engine: Engine) -> Callable[[], int]:
    """Wrap the context's ``state_set``: how many restores llama.cpp refused."""
    ctx = engine.context
    assert ctx is not None
    original = ctx.state_set
    failures = [0]

    def counted(seq_id: int, blob: bytes) -> bool:
        ok = original(seq_id, blob)
        failures[0] += 0 if ok else 1
        return ok

    ctx.state_set = counted  # type: ignore[method-assign]
    return lambda: failures[0]


def _run(engine: Engine, key: int, events: list[Event]) -> list[int]:
    completion = engine.run_until_done(key, events.append)
    assert completion.error is None
    return completion.tokens


@pytest.mark.parametrize("arch", ONE_OF_EACH)
def test_restores_wait_for_room_and_say_so(
    arch: str, family_models: dict[str, Path], caplog: pytest.LogCaptureFixture
) -> None:
    with _open(family_models[arch], n_ctx=512) as source:
        states, expected = [], []
        for i in range(3):
            key = source.open_sequence()
            source.set_tokens(key, _prompt(i))
            source.prefill(key)
            source.run_until_done(key)
            states.append(source.save_state(key))
            expected.append(source.complete(key, GREEDY).tokens)
    # 256 cells: room for one 151-token cache at a time (a recurrent cache needs a slot only).
    with _open(family_models[arch], n_ctx=256) as engine:
        recurrent = engine.cache_traits.family is CacheFamily.RECURRENT
        failed = _count_failed_restores(engine)
        a, b, c = (engine.open_sequence() for _ in range(3))
        assert engine.restore_state_outcome(a, states[0]) is RestoreOutcome.RESTORED
        assert engine.take_events() == []
        # The idle one leaves for its parked state before llama.cpp is asked.
        assert engine.restore_state_outcome(b, states[1]) is RestoreOutcome.RESTORED
        assert (Evicted(a) in engine.take_events()) is not recurrent
        engine.start(b, GREEDY)  # busy: its cells stay
        outcome = engine.restore_state_outcome(c, states[2])
        if recurrent:
            assert outcome is RestoreOutcome.RESTORED
        else:
            assert outcome is RestoreOutcome.PARKED
            assert engine.last_restore_error and "no room" in engine.last_restore_error
            assert not engine.info(c).resident and engine.pending_tokens(c) == []
        events: list[Event] = []
        assert _run(engine, b, events) == expected[1]
        # c comes back when it is used: reported, and nothing of its prompt decoded again.
        engine.start(c, GREEDY)
        events = []
        assert _run(engine, c, events) == expected[2]
        assert (StateRestored(c, True) in events) is not recurrent
        assert engine.run_until_done(c).n_prompt_processed <= 1
        events = []
        engine.start(a, GREEDY)
        assert _run(engine, a, events) == expected[0]
        assert not [e for e in events if isinstance(e, StateRestored) and not e.restored]
        assert failed() == 0
    assert "available cells" not in caplog.text
    assert "failed to restore" not in caplog.text


@pytest.mark.parametrize("arch", ONE_OF_EACH)
def test_a_rebuilt_context_too_small_for_a_cache_reports_it_and_rereads_the_text(
    arch: str, family_models: dict[str, Path]
) -> None:
    long_user = {"role": "user", "content": " ".join(["one two three four five"] * 12)}
    history = [SYSTEM, long_user]
    with _open(family_models[arch], n_ctx=512, n_seq_max=2) as engine:
        key = engine.open_sequence()
        engine.set_chat(key, history)
        first = engine.complete(key, GREEDY)
        held = len(engine.tokens(key))
        assert 256 <= held < 512
        engine.take_events()
        engine.reconfigure(ContextSettings(**{**engine.settings.to_dict(), "n_ctx": 256}))
        lost = [e for e in engine.take_events() if isinstance(e, StateRestored)]
        assert len(lost) == 1 and lost[0].key == key and not lost[0].restored
        assert lost[0].reason is not None and "no longer fits" in lost[0].reason
        assert f"{held:,}" in lost[0].reason
        assert engine.tokens(key) == []
        # The next turn reads the conversation from its text, fitted to the new context.
        follow_up = {"role": "user", "content": "what is my name"}
        history = [*history, {"role": "assistant", "content": first.text}, follow_up]
        engine.set_chat(key, history)
        assert engine.info(key).n_tokens + engine.info(key).n_reserved <= 256
        after = engine.complete(key, GREEDY)
        assert after.error is None and after.n_prompt_processed == after.n_prompt
        # Same chunking: the turn re-read its whole prompt (checked above), as the probe does.
        probe = engine.open_sequence()
        engine.set_tokens(probe, engine.tokens(key)[: after.n_prompt])
        assert engine.complete(probe, GREEDY).tokens == after.tokens
