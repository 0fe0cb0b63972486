"""The session's turn logic on a fake engine (tests/session/fake_engine.py): no llama.cpp.

What the session does with an engine's capabilities, stops, refusals and errors, and what
its recorder writes, checked against an engine whose every answer is known.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from app.engine import Completion, ContextSettings, Finished, SamplingParams, TokenText
from app.engine.reasoning import Channel
from app.errors import LlamaDeskError
from app.session import (
    Capability,
    ChatMessage,
    FinishReason,
    NoModelError,
    RestoreOutcome,
    Session,
    TurnResult,
)
from app.session import events as ev
from app.session.session_thread import in_session_thread, on_session_thread
from app.storage import Database, StateStore
from tests.session.fake_engine import FakeEngine, FakeLoader
from tests.session.test_session import Recorder as Events

TIMEOUT = 10.0
HELLO = (ChatMessage("user", "hello"),)


class Harness:
    def __init__(
        self,
        engine: FakeEngine,
        store: StateStore | None = None,
        database: Database | None = None,
        stream_interval_s: float = 0.0,
    ) -> None:
        self.engine = engine
        self.session = Session(
            store, database, loader=FakeLoader(engine), stream_interval_s=stream_interval_s
        )
        self.events = Events(self.session)

    def load(self) -> None:
        self.session.load_model("/models/fake.gguf", ContextSettings())
        self.events.wait(lambda: bool(self.events.session_of(ev.ModelLoaded)))

    def close(self) -> None:
        self.session.shutdown()
        assert self.session.join(TIMEOUT)


Make = Callable[..., Harness]


@pytest.fixture
def make() -> Iterator[Make]:
    """Harnesses, shut down after the test."""
    made: list[Harness] = []

    def build(
        engine: FakeEngine,
        store: StateStore | None = None,
        database: Database | None = None,
        stream_interval_s: float = 0.0,
    ) -> Harness:
        harness = Harness(engine, store, database, stream_interval_s)
        made.append(harness)
        return harness

    yield build
    for harness in made:
        harness.close()


def loaded(make: Make, engine: FakeEngine, store: StateStore | None = None) -> Harness:
    harness = make(engine, store)
    harness.load()
    return harness


def test_a_turn_streams_the_engine_text_and_ends_with_its_result(make: Make) -> None:
    h = loaded(make, FakeEngine())
    h.events.follow(1)
    turn = h.session.submit(1, HELLO)
    result = h.events.finish(1)
    assert result.text == "Hello there" and result.finish_reason is FinishReason.EOG
    assert h.events.text(1) == "Hello there"
    started = h.events.of(1, ev.TurnStarted)
    assert isinstance(started[0], ev.TurnStarted) and started[0].turn_id == turn
    assert started[0].n_to_process == len("<user>hello")
    # a second turn on the same history: the cache holds the prompt
    h.session.submit(1, (*HELLO, ChatMessage("assistant", "Hello there")))
    assert h.events.finish(1, 2).n_prompt_processed < h.events.finish(1, 2).n_prompt


def test_stop_ends_a_turn_aborted_and_the_conversation_goes_on(make: Make) -> None:
    h = loaded(make, FakeEngine(endless=True))
    h.events.follow(1)
    h.session.submit(1, HELLO)
    h.events.wait(lambda: bool(h.events.of(1, ev.TextStreamed)))
    h.session.stop(1)
    assert h.events.finish(1).finish_reason is FinishReason.ABORTED
    h.engine.endless = False
    h.session.submit(1, HELLO, sampling=SamplingParams(max_tokens=2))
    assert h.events.finish(1, 2).text == "Hello"


def test_a_turn_stopped_before_it_starts_never_reaches_the_engine(make: Make) -> None:
    h = loaded(make, FakeEngine())
    h.events.follow(1)
    with h.session.batch():
        gate = threading.Event()
        h.session.call(lambda _engine: gate.wait(TIMEOUT))  # holds the thread
        h.session.submit(1, HELLO)
        h.session.stop(1)
        gate.set()
    result = h.events.finish(1)
    assert result.finish_reason is FinishReason.ABORTED and result.error is None
    assert "start" not in h.engine.calls
    assert not h.events.of(1, ev.TurnFailed)


def test_a_second_turn_while_answering_is_refused(make: Make) -> None:
    h = loaded(make, FakeEngine(endless=True))
    h.events.follow(1)
    with h.session.batch():
        h.session.submit(1, HELLO)
        h.session.submit(1, HELLO)
    h.events.wait(lambda: bool(h.events.of(1, ev.TurnFailed)))
    failed = h.events.of(1, ev.TurnFailed)[0]
    assert isinstance(failed, ev.TurnFailed) and "still answering" in failed.message
    assert h.events.finish(1).finish_reason is FinishReason.ERROR
    h.session.stop(1)
    assert h.events.finish(1, 2).finish_reason is FinishReason.ABORTED


def test_without_a_model_a_turn_fails_with_a_sentence(make: Make) -> None:
    h = make(FakeEngine())
    h.events.follow(1)
    h.session.submit(1, HELLO)
    result = h.events.finish(1)
    assert result.finish_reason is FinishReason.ERROR and "No model is loaded" in str(result.error)
    with pytest.raises(NoModelError):
        h.session.call(lambda engine: engine).result(TIMEOUT)


def test_an_engine_refusal_and_a_sequence_failure_end_the_turn_with_the_error(
    make: Make,
) -> None:
    engine = FakeEngine()
    h = loaded(make, engine)
    h.events.follow(1)
    engine.fail_start = "The prompt does not fit."
    h.session.submit(1, HELLO)
    first = h.events.finish(1)
    assert first.finish_reason is FinishReason.ERROR and first.error == "The prompt does not fit."
    engine.fail_start = None
    engine.fail_sequence = "decode failed"
    h.session.submit(1, HELLO)
    assert h.events.finish(1, 2).finish_reason is FinishReason.ERROR
    messages = [e.message for e in h.events.of(1, ev.TurnFailed) if isinstance(e, ev.TurnFailed)]
    assert messages == ["The prompt does not fit.", "decode failed"]


def test_a_failing_step_is_a_session_error_and_stops_the_busy_turns(make: Make) -> None:
    engine = FakeEngine(endless=True)
    h = loaded(make, engine)
    h.events.follow(1)
    engine.fail_step = "the batch went wrong"
    h.session.submit(1, HELLO)
    assert h.events.finish(1).finish_reason is FinishReason.ABORTED
    errors = h.events.session_of(ev.SessionError)
    assert [e.message for e in errors if isinstance(e, ev.SessionError)] == ["the batch went wrong"]


def test_bad_sampling_is_refused_before_the_engine(make: Make) -> None:
    h = loaded(make, FakeEngine())
    h.events.follow(1)
    h.session.submit(1, HELLO, sampling=SamplingParams(temperature=-1.0))
    assert h.events.finish(1).finish_reason is FinishReason.ERROR
    assert "start" not in h.engine.calls


def test_regenerate_repeats_the_last_chat_turn_and_needs_one(make: Make) -> None:
    h = loaded(make, FakeEngine())
    h.events.follow(1)
    h.session.regenerate(1)
    assert "no turn to regenerate" in str(h.events.finish(1).error)
    h.session.submit(1, HELLO)
    h.events.finish(1, 2)
    h.session.regenerate(1)
    again = h.events.finish(1, 3)
    assert again.text == "Hello there" and again.n_prompt_processed == 0


@pytest.mark.parametrize(
    ("capabilities", "expect_fork"),
    [(Capability.ALL, True), (Capability.ALL & ~Capability.FORK_CACHE, False)],
)
def test_a_fork_takes_the_cache_only_from_an_engine_that_can(
    make: Make, capabilities: Capability, expect_fork: bool
) -> None:
    h = loaded(make, FakeEngine(capabilities))
    h.events.follow(1)
    h.events.follow(2)
    h.session.submit(1, HELLO)
    h.events.finish(1)
    h.session.fork(1, 2, HELLO)
    h.events.wait(lambda: bool(h.events.of(2, ev.ConversationForked)))
    forked = h.events.of(2, ev.ConversationForked)[0]
    assert isinstance(forked, ev.ConversationForked)
    assert ("fork" in h.engine.calls) is expect_fork
    assert forked.n_tokens == (len("<user>hello") if expect_fork else 0)
    # the fork answers either way: from the taken-over cache, or re-reading its text
    h.session.submit(2, HELLO)
    result = h.events.finish(2)
    assert result.text == "Hello there"
    assert result.n_prompt_processed == (0 if expect_fork else len("<user>hello"))


def test_what_an_engine_cannot_do_is_refused_with_a_sentence(make: Make, tmp_path: Path) -> None:
    store = StateStore(tmp_path / "states")
    h = loaded(make, FakeEngine(Capability.NONE), store)
    h.events.follow(1)
    h.session.submit_tokens(1, (5, 6, 7))
    assert "prompts of tokens" in str(h.events.finish(1).error)
    h.session.submit_text(1, "raw")
    assert "prompts of tokens" in str(h.events.finish(1, 2).error)
    with pytest.raises(LlamaDeskError, match="calls into an in-process engine"):
        h.session.call(lambda engine: engine).result(TIMEOUT)
    h.session.submit(1, HELLO)
    h.events.finish(1, 3)
    with pytest.raises(LlamaDeskError, match="saving and restoring"):
        h.session.save_state_file(1, str(tmp_path / "one.state")).result(TIMEOUT)
    h.session.close(1)
    h.events.wait(lambda: bool(h.events.of(1, ev.ConversationClosed)))
    assert "save" not in h.engine.calls and not list(store.directory.glob("*"))


def test_a_closed_conversation_is_saved_and_restored_when_opened_again(
    make: Make, tmp_path: Path
) -> None:
    store = StateStore(tmp_path / "states")
    engine = FakeEngine()
    h = loaded(make, engine, store)
    h.events.follow(1)
    h.session.submit(1, HELLO)
    h.events.finish(1)
    held = h.session.inspect(1).result(TIMEOUT).tokens
    h.session.close(1)
    h.events.wait(lambda: bool(h.events.of(1, ev.ConversationClosed)))
    h.session.open(1)
    h.events.wait(lambda: len(h.events.of(1, ev.CacheRestored)) >= 2)
    restored = h.events.of(1, ev.CacheRestored)[-1]
    assert isinstance(restored, ev.CacheRestored) and restored.outcome is RestoreOutcome.RESTORED
    assert h.session.inspect(1).result(TIMEOUT).tokens == held


def test_streamed_text_keeps_each_channel_in_order(make: Make) -> None:
    """Pieces are coalesced per channel, in order; a token that ends the reasoning and
    starts the answer counts once."""

    class OneStep(FakeEngine):
        def step(self) -> list[object]:  # type: ignore[override]
            key = next(iter(self.seqs))
            self.seqs[key].busy = False
            completion = Completion(text="B", tokens=[1, 2], reasoning="a1a2", reasoning_ms=1500.0)
            return [
                TokenText(key, "a1", 1, Channel.REASONING),
                TokenText(key, "a2", 2, Channel.REASONING),
                TokenText(key, "B", 2, Channel.ANSWER),  # the same token ended the thinking
                Finished(key, completion),
            ]

    h = make(OneStep(), stream_interval_s=10.0)  # coalesce everything of the step
    h.load()
    h.events.follow(3)
    turn = h.session.submit(3, HELLO)
    result = h.events.finish(3)
    pieces = [
        (e.text, e.channel, e.n_tokens)
        for e in h.events.of(3, ev.TextStreamed)
        if isinstance(e, ev.TextStreamed)
    ]
    assert pieces == [("a1a2", Channel.REASONING, 2), ("B", Channel.ANSWER, 0)]
    finished = h.events.of(3, ev.TurnFinished)[0]
    assert isinstance(finished, ev.TurnFinished) and finished.turn_id == turn
    assert result.text == "B" and result.reasoning == "a1a2" and result.reasoning_ms == 1500.0


def test_what_runs_on_the_session_thread_is_asserted(make: Make) -> None:
    @on_session_thread
    def touch() -> str:
        return "touched"

    h = loaded(make, FakeEngine())
    assert not in_session_thread()
    with pytest.raises(AssertionError, match="runs on the session thread only"):
        touch()
    assert h.session.call(lambda _engine: touch()).result(TIMEOUT) == "touched"


def test_a_result_says_how_many_prompt_tokens_came_from_the_cache() -> None:
    assert TurnResult(n_prompt=10, n_prompt_processed=4).cached_tokens == 6
    assert TurnResult(n_prompt=3, n_prompt_processed=5).cached_tokens == 0
