"""The batching choice for a given measured cost (issue 20, item 2), pinned: which mode a
load picks from the figures its measurement gave, and what it says about them; and the
threads several generating tabs decode with."""

from __future__ import annotations

from pathlib import Path

import llama_cpp
import pytest

from app.engine import Engine, SamplingParams
from app.engine.batching import BatchMode, choose
from app.engine.threads import decode_threads
from tests.support.settings import small_settings


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


def test_decode_threads_give_generated_tokens_the_generation_threads() -> None:
    assert decode_threads(1, 2, prompt=True) == (1, 2)
    assert decode_threads(1, 2, prompt=False) == (1, 1)
    assert decode_threads(3, 3, prompt=False) == (3, 3)


def test_several_tabs_generating_decode_with_the_generation_threads(tiny_model: Path) -> None:
    """llama.cpp takes n_threads_batch for any batch of more than one token: two tabs'
    tokens alone must not run on the prompt threads (every core: the cliff)."""
    with Engine.open(tiny_model, small_settings(n_threads=1, n_threads_batch=2)) as engine:
        engine.pin_batching(BatchMode.BATCHED)
        ctx = engine.context
        assert ctx is not None

        def live() -> tuple[int, int]:
            return (
                int(llama_cpp.llama_n_threads(ctx.handle)),
                int(llama_cpp.llama_n_threads_batch(ctx.handle)),
            )

        params = SamplingParams(temperature=0, max_tokens=8)
        keys = [engine.open_sequence() for _ in range(2)]
        for key, text in zip(keys, ("hello world", "the model"), strict=True):
            engine.set_prompt(key, text)
            engine.start(key, params)
        engine.step()  # both prompts in one batch: the prompt threads
        assert live() == (1, 2)
        engine.step()  # both tabs' tokens alone
        assert live() == (1, 1)
        late = engine.open_sequence()  # a prompt joins the generating tabs' batch
        engine.set_prompt(late, "one two three four five")
        engine.start(late, params)
        engine.step()
        assert live() == (1, 2)
        while engine.has_work():
            engine.step()
        assert live() == (1, 1)
        # The settings are untouched: a rebuild or the next prompt uses them as they were.
        assert (ctx.settings.n_threads, ctx.settings.n_threads_batch) == (1, 2)
