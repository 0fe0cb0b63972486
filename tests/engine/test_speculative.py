"""Speculative decoding in the batched step (app.engine.speculative), on every family.

Guesses come from two drafters: prompt lookup (the one users get) and a scripted one that
knows the reply a run without guesses gave and spoils some of its guesses on purpose, so
every test sees kept guesses, rejected ones and a cache cut back after them.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from app.engine import Engine, SamplingParams
from app.engine.speculative import (
    FIRST_PAUSE_STEPS,
    MISSES_BEFORE_PAUSE,
    NgramDrafter,
    SpecMode,
    SpecSettings,
    SpecState,
    best_length,
    expected_tokens,
    supported,
)
from tests.support.arch_models import ARCHITECTURES
from tests.support.settings import small_settings

GREEDY = SamplingParams(temperature=0, max_tokens=24)
NGRAM = SamplingParams(temperature=0, max_tokens=24, speculative="ngram", draft_max=6)
PROMPT = "one two three four five six seven eight nine ten one two three four five six"


class ScriptedDrafter:
    """Proposes the reference reply's next tokens; every other guess has its third token
    (or its last) changed, so it is rejected there."""

    def __init__(self, n_prompt: int, reference: list[int], n_vocab: int) -> None:
        self.n_prompt, self.reference, self.n_vocab = n_prompt, reference, n_vocab
        self.calls = 0

    def draft(self, history: Sequence[int], n_max: int) -> list[int]:
        # history = the prompt + the reply so far (its last token still to decode)
        done = len(history) - self.n_prompt
        guess = list(self.reference[done : done + n_max])
        self.calls += 1
        if guess and self.calls % 2 == 0:
            spoil = min(2, len(guess) - 1)
            guess[spoil] = (guess[spoil] + 1) % self.n_vocab
        return guess


def _open(path: Path) -> Engine:
    return Engine.open(path, small_settings(n_threads=1, n_threads_batch=1))


def _plain_then_guessing(
    engine: Engine, params: SamplingParams
) -> tuple[int, int, list[int], SpecState]:
    """The reply to PROMPT without guesses, then the same reply started again with n-gram
    guesses: its sequence, the prompt's length, the plain reply's tokens, the guessing state
    (for a test to swap its drafter before running it)."""
    key = engine.open_sequence()
    engine.set_prompt(key, PROMPT)
    plain = engine.complete(key, params).tokens
    engine.clear_sequence(key)
    n_prompt = engine.set_prompt(key, PROMPT)
    engine.start(key, replace(params, speculative="ngram"))
    state = engine._seqs[key].spec
    assert state is not None
    return key, n_prompt, plain, state


@pytest.fixture(params=ARCHITECTURES)
def arch_engine(request: pytest.FixtureRequest, family_models: dict[str, Path]) -> Iterator[Engine]:
    with _open(family_models[str(request.param)]) as e:
        yield e


def _reply(
    engine: Engine, params: SamplingParams, scripted: list[int] | None = None
) -> tuple[list[int], int, int, np.ndarray]:
    """(reply tokens, drafted, accepted, next logits) of a fresh sequence on PROMPT; checks
    that the cache holds exactly the prompt and the reply (but its queued last token)."""
    key = engine.open_sequence()
    try:
        n_prompt = engine.set_prompt(key, PROMPT)
        prompt = engine.pending_tokens(key)
        engine.start(key, params)
        state = engine._seqs[key].spec
        if scripted is not None and state is not None:
            state.drafter = ScriptedDrafter(n_prompt, scripted, engine.model_info.n_vocab)
            state.adaptive = False  # every step guesses: the verify is what is tested
        done = engine.run_until_done(key)
        held = engine.tokens(key)
        reply = done.tokens
        assert held[:n_prompt] == prompt
        assert held[n_prompt:] == (reply + engine.pending_tokens(key))[: len(held) - n_prompt]
        assert len(held) + len(engine.pending_tokens(key)) == n_prompt + len(reply) + (
            1 if done.finish_reason == "eog" else 0
        )
        ctx, seq_id = engine.context, engine._seqs[key].seq_id
        assert ctx is not None and seq_id is not None
        assert ctx.seq_pos_max(seq_id) == len(held) - 1  # rejected guesses are gone
        logits = engine.next_logits(key)
        return reply, done.n_drafted, done.n_accepted, logits
    finally:
        engine.close_sequence(key)


def test_greedy_identity_and_cache_after_rejected_guesses(arch_engine: Engine) -> None:
    plain, drafted0, _, logits0 = _reply(arch_engine, GREEDY)
    assert drafted0 == 0
    spec, drafted, accepted, logits = _reply(arch_engine, NGRAM, scripted=plain)
    assert spec == plain
    if supported(arch_engine.cache_traits):
        assert 0 < accepted < drafted  # both kinds were verified
    else:
        assert drafted == 0  # recurrent and hybrid caches never guess
    # The cache after the cuts continues like the one that never guessed (the verify
    # decodes differ in shape, so to a tolerance: DESIGN.md section 7).
    assert int(np.argmax(logits)) == int(np.argmax(logits0))
    # (measured: at most 1.8e-3 apart, on gemma4, with logits up to about 6)
    assert float(np.max(np.abs(logits - logits0))) < 1e-2


def test_ngram_greedy_identity(arch_engine: Engine) -> None:
    plain, _, _, _ = _reply(arch_engine, GREEDY)
    spec, _, _, _ = _reply(arch_engine, NGRAM)
    assert spec == plain


class WrongDrafter:
    """Always guesses, always wrong: the first token of every guess is not what greedy
    takes (it knows the reference reply)."""

    def __init__(self, n_prompt: int, reference: list[int], n_vocab: int) -> None:
        self.n_prompt, self.reference, self.n_vocab = n_prompt, reference, n_vocab
        self.calls = 0

    def draft(self, history: Sequence[int], n_max: int) -> list[int]:
        self.calls += 1
        done = len(history) - self.n_prompt
        if done >= len(self.reference):
            return []
        return [(self.reference[done] + 1) % self.n_vocab] * n_max


def test_a_sequence_whose_guesses_fail_pauses_and_tries_again() -> None:
    state = SpecState(SpecSettings(SpecMode.NGRAM, draft_max=8))
    history = [1, 2, 3, 1, 2, 3, 1, 2]  # prompt lookup always finds "3 1 2 ..." here
    assert not state.propose(history, 8)  # no step measured yet: one without guesses first
    state.timed(20.0, 0)
    pauses = []
    for _round in range(2):
        for _miss in range(MISSES_BEFORE_PAUSE):
            assert state.propose(history, 8)
            state.record(2, 0)
        steps = 0
        while not state.propose(history, 8):
            steps += 1
        pauses.append(steps)
    assert pauses == [FIRST_PAUSE_STEPS, 2 * FIRST_PAUSE_STEPS]  # the pause doubles
    state.record(2, 2)  # a hit: the next pause is short again
    assert state.next_pause == FIRST_PAUSE_STEPS
    assert state.drafted == 2 * MISSES_BEFORE_PAUSE * 2 + 2 and state.accepted == 2


def test_guesses_are_as_long_as_they_pay() -> None:
    # This CPU (SmolLM2, one thread, long context): a guessed token adds 0.75 of a step.
    assert best_length(0.6, 0.75, 8)[0] == 0  # 60% kept: no guess pays
    k, gain = best_length(0.97, 0.75, 8)
    assert k >= 1 and gain > 1.05  # a copy kept nearly whole does
    assert best_length(0.6, 0.05, 8)[0] >= 3  # where a wider batch is nearly free, guess on
    assert expected_tokens(0.5, 2) == 1.75 and expected_tokens(1.0, 4) == 5.0
    state = SpecState(SpecSettings(SpecMode.NGRAM, draft_max=8))
    state.timed(20.0, 0)
    state.timed(50.0, 2)  # two guessed tokens added 30 ms: 0.75 of a step each
    assert state.extra_cost == 0.75
    assert len(state.propose([1, 2, 3, 1, 2], 8)) == 3  # the first guess is a probe
    for _ in range(6):
        state.record(4, 1)  # a quarter kept
    assert state.propose([1, 2, 3, 1, 2], 8) == [] and state.pause == FIRST_PAUSE_STEPS
    assert state.probe  # after the pause, one probe again
    state.pause = 0
    assert state.propose([1, 2, 3, 1, 2], 8)
    state.record(3, 2)  # most of it kept, but at this cost no guess pays: probes grow rarer
    assert state.next_pause == 2 * FIRST_PAUSE_STEPS


def test_failing_guesses_stop_in_the_engine(tiny_model: Path) -> None:
    params = SamplingParams(temperature=0, max_tokens=40)
    with _open(tiny_model) as engine:
        key, n_prompt, plain, state = _plain_then_guessing(engine, params)
        drafter = state.drafter = WrongDrafter(n_prompt, plain, engine.model_info.n_vocab)
        done = engine.run_until_done(key)
        assert done.tokens == plain and done.n_accepted == 0
        # 40 steps; guessing every step would have been 39 guesses
        assert 1 <= drafter.calls <= 2 * MISSES_BEFORE_PAUSE and state.n_pauses >= 1


def test_sampled_replies_draw_the_same_tokens(tiny_model: Path) -> None:
    """The acceptance rule is the sampler's own draw per row: with the same seed, a reply
    with guesses kept and rejected is the reply without guesses, token for token."""
    params = SamplingParams(temperature=0.9, top_k=40, seed=7, max_tokens=40)
    with _open(tiny_model) as engine:
        key, n_prompt, plain, state = _plain_then_guessing(engine, params)
        state.drafter = ScriptedDrafter(n_prompt, plain, engine.model_info.n_vocab)
        state.adaptive = False
        done = engine.run_until_done(key)
        assert done.tokens == plain
        assert 0 < done.n_accepted < done.n_drafted


def test_ngram_drafter_proposes_what_followed_the_latest_match() -> None:
    drafter = NgramDrafter()
    history = [5, 6, 7, 8, 9, 1, 2, 5, 6, 7]
    assert drafter.draft(history, 3) == [8, 9, 1]
    assert drafter.draft([*history, 4], 3) == []  # "6 7 4" and "7 4" never occurred
    history = [*history, 8, 9, 3, 6, 7]  # now "6 7" last continued with 8 9 3
    assert drafter.draft(history, 5) == [8, 9, 3, 6, 7]
    assert drafter.draft([1, 2, 1], 4) == []  # the index is rebuilt for another history


def test_settings_refuse_bad_values() -> None:
    with pytest.raises(ValueError, match="between 1 and 64"):
        SpecSettings(SpecMode.NGRAM, draft_max=0)
    with pytest.raises(ValueError, match="must be one of off, ngram"):
        SpecSettings.of("lookahead")
    with pytest.raises(ValueError, match="must be one of off, ngram"):
        SpecSettings.of("draft")  # no draft model yet
    assert SpecSettings.of("ngram", 5).to_dict() == {"mode": "ngram", "draft_max": 5}


CODE = '''def parse_config(path):
    """Read the configuration file and return a dictionary of settings."""
    settings = {}
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            key, _, value = line.partition("=")
            settings[key.strip()] = value.strip()
    return setings
'''


def test_real_model_editing_reply_is_the_same_with_prompt_lookup(smollm2: Path) -> None:
    """SmolLM2 repeating code back: the same greedy reply with and without guesses, most
    guesses kept. Where trained weights make the wider verify decode flip a near tie
    (DESIGN.md section 7), the replies may part: then the guessed reply's every token must
    be within tests/real/logit_check.py's tolerance of the best in a solo run."""
    from tests.real.logit_check import TOLERANCE, greedy_gaps, solo_engine

    messages = [{"role": "user", "content": "Copy this code:\n\n```python\n" + CODE + "```"}]
    params = SamplingParams(temperature=0, max_tokens=96)
    settings = small_settings(n_ctx=2048, n_batch=128, n_ubatch=128, n_seq_max=2)
    with Engine.open(smollm2, settings) as engine:
        plain = engine.chat(messages, params)
        key = engine.open_sequence()
        engine.set_chat(key, messages)
        engine.start(key, replace(params, speculative="ngram"))
        state = engine._seqs[key].spec
        assert state is not None
        state.adaptive = False  # guess every step: on this CPU few guesses would pay
        spec = engine.run_until_done(key)
    # The 135M model copies the first 40 tokens or so, then wanders (measured: 35 of 112
    # reply tokens were kept guesses).
    assert spec.n_accepted > 0.2 * len(spec.tokens)
    if spec.tokens != plain.tokens:
        with solo_engine(smollm2) as solo:
            gaps = greedy_gaps(solo, messages, spec.tokens, spec.finish_reason == "eog")
        assert max(gaps) <= TOLERANCE
