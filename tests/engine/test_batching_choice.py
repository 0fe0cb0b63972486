"""The batching choice for a given measured cost (issue 20, item 2), pinned: which mode a
load picks from the figures its measurement gave, and what it says about them."""

from __future__ import annotations

import pytest

from app.engine.batching import BatchMode, choose


@pytest.mark.parametrize(
    ("batch_of_two_ms", "one_by_one_ms", "mode"),
    [
        # The Gemma file at 1 thread: a batch of 2 cost ~3x one sequence's step
        # (one token: 14 ms), so two single decodes (28 ms) give 1.5x the tokens per second.
        (42.0, 28.0, BatchMode.TURNS),
        # The Q8_0 Qwen-shaped model of benchmarks/bench_cpu.py here at 1 thread: a batch of
        # 2 cost ~1.25x one token, so one batch gives 1.6x the tokens per second.
        (106.0, 170.0, BatchMode.BATCHED),
        # The F16 model: a batch of 2 costs about one token.
        (20.0, 38.0, BatchMode.BATCHED),
        # Turns win by less than the margin (15 %): a near tie stays batched.
        (30.0, 27.0, BatchMode.BATCHED),
        (31.1, 27.0, BatchMode.TURNS),
        # Equal costs: batched (one decode keeps tabs and prompt chunks in step).
        (25.0, 25.0, BatchMode.BATCHED),
    ],
)
def test_the_mode_for_a_measured_cost(
    batch_of_two_ms: float, one_by_one_ms: float, mode: BatchMode
) -> None:
    choice = choose(batch_of_two_ms, one_by_one_ms, n_threads=1)
    assert choice.mode is mode
    assert not choice.pinned
    assert (choice.batch_of_two_ms, choice.one_by_one_ms, choice.n_threads) == (
        batch_of_two_ms,
        one_by_one_ms,
        1,
    )


def test_the_reason_gives_the_figures_and_the_threads() -> None:
    turns = choose(42.0, 28.0, n_threads=1)
    assert turns.reason == (
        "Tabs generate in turn: a batch of 2 tokens took 42.0 ms, 2 single decodes 28.0 ms "
        "(1 thread), so one batch would be slower in total."
    )
    batched = choose(106.0, 170.0, n_threads=2)
    assert batched.reason == (
        "Generating tabs share one batch: a batch of 2 tokens took 106.0 ms, 2 single "
        "decodes 170.0 ms (2 threads)."
    )
    assert batched.to_dict() == {
        "mode": "batched",
        "reason": batched.reason,
        "batch_of_two_ms": 106.0,
        "one_by_one_ms": 170.0,
        "n_threads": 2,
        "pinned": False,
    }
