"""How the tests on the real model judge a reply that ran in a batch of unknown shape.

Trained weights make llama.cpp's CPU output depend on the batch's shape (DESIGN.md section
7): a greedy reply decoded next to three others may take another token where two are
nearly tied. So a batched greedy reply is checked against a fresh one-sequence run by
logits, within a tolerance: teacher-forced through the same prompt, every token the reply
took must be within ``TOLERANCE`` of that run's best logit, and a reply that ended by
itself must end where the end of turn is as close to the best. A reply from the wrong
sequence, a mixed-up cache or a broken kernel fails this by whole logits.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from app.engine import ContextSettings, Engine

# Batch-shape noise on SmolLM2 Q4_1 measured here: up to 0.21 logits (four clients at once,
# tests/real/test_serve.py); the same reply checked against another question is 9 logits
# behind. 1.0 leaves room for other CPUs' kernels and still fails a wrong reply.
TOLERANCE = 1.0


def solo_engine(model: Path) -> Engine:
    """A fresh one-sequence engine for the reference run."""
    return Engine.open(
        model,
        ContextSettings(n_ctx=2048, n_batch=256, n_ubatch=256, n_seq_max=1, n_threads=1),
    )


def greedy_gaps(
    engine: Engine, messages: Sequence[dict[str, str]], reply: str | list[int], ended: bool
) -> list[float]:
    """For each token of ``reply`` (its sampled tokens, or its text tokenized) and the end
    of turn when ``ended``: how far its logit is below the best one in a one-sequence run
    of the same conversation."""
    key = engine.open_sequence()
    try:
        engine.set_chat(key, list(messages))
        tokens = (
            engine.tokenize(reply, add_special=False, parse_special=False)
            if isinstance(reply, str)
            else reply
        )
        model = engine.model
        assert model is not None
        gaps: list[float] = []
        for token in tokens:
            logits = engine.next_logits(key)
            gaps.append(float(np.max(logits) - logits[token]))
            engine.append_tokens(key, [token])
        if ended:
            logits = engine.next_logits(key)
            eog = [t for t in range(len(logits)) if model.is_eog(t)]
            gaps.append(float(np.max(logits) - max(logits[t] for t in eog)))
        return gaps
    finally:
        engine.close_sequence(key)


def assert_greedy_within(
    engine: Engine, messages: Sequence[dict[str, str]], reply: str | list[int], ended: bool
) -> float:
    """Every step of ``reply`` was a greedy choice up to ``TOLERANCE``; the largest gap."""
    assert reply, "the reply is empty"
    gaps = greedy_gaps(engine, messages, reply, ended)
    worst = max(gaps)
    assert worst <= TOLERANCE, (
        f"{reply!r}: token {gaps.index(worst)} is {worst:.3f} logits behind the best "
        f"of a one-sequence run (gaps {[round(g, 3) for g in gaps]})"
    )
    return worst
