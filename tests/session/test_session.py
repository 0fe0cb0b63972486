"""The session layer without Qt: the real engine on its thread, tiny generated models."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from app.engine import ContextSettings, SamplingParams
from app.engine.reasoning import Channel
from app.session import (
    ChatMessage,
    ContextFullPolicy,
    FinishReason,
    RestoreOutcome,
    Session,
    TurnResult,
    policy_of,
)
from app.session import events as ev
from app.storage import Database, StateStore
from tests.support.arch_models import write_arch_model

CONTEXT = ContextSettings(
    n_ctx=1024, n_batch=128, n_ubatch=128, n_seq_max=4, n_threads=1, n_threads_batch=1
)
ENDLESS = 'root ::= ("hello" | " world" | " tab" | " llama") root'
WORDS = 'root ::= ("hello" | " world" | " tab" | " llama")+'
TIMEOUT = 30.0


def words(max_tokens: int, seed: int = 7, grammar: str = WORDS) -> SamplingParams:
    return SamplingParams(temperature=0.8, seed=seed, max_tokens=max_tokens, grammar=grammar)


def user(text: str) -> ChatMessage:
    return ChatMessage("user", text)


class Recorder:
    """Every event of a session, collected from the session thread."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self._lock = threading.RLock()
        self._cond = threading.Condition(self._lock)
        self.conversation: list[ev.ConversationEvent] = []
        self.session_events: list[ev.SessionEvent] = []
        session.subscribe_session(self._on_session)

    def follow(self, cid: int) -> None:
        self.session.subscribe(cid, self._on_conversation)

    def _on_conversation(self, event: ev.ConversationEvent) -> None:
        with self._cond:
            self.conversation.append(event)
            self._cond.notify_all()

    def _on_session(self, event: ev.SessionEvent) -> None:
        with self._cond:
            self.session_events.append(event)
            self._cond.notify_all()

    def wait(self, test: Callable[[], bool], timeout: float = TIMEOUT) -> None:
        with self._cond:
            assert self._cond.wait_for(test, timeout), "timed out"

    def of(self, cid: int, kind: type[ev.ConversationEvent]) -> list[ev.ConversationEvent]:
        with self._lock:
            return [e for e in self.conversation if e.conversation_id == cid and type(e) is kind]

    def results(self, cid: int) -> list[TurnResult]:
        return [e.result for e in self.of(cid, ev.TurnFinished) if isinstance(e, ev.TurnFinished)]

    def text(self, cid: int, channel: Channel = Channel.ANSWER) -> str:
        pieces = [e for e in self.of(cid, ev.TextStreamed) if isinstance(e, ev.TextStreamed)]
        return "".join(e.text for e in pieces if e.channel is channel)

    def finish(self, cid: int, count: int = 1, timeout: float = TIMEOUT) -> TurnResult:
        """Wait for the ``count``-th finished turn of ``cid`` and return it."""
        self.wait(lambda: len(self._finished(cid)) >= count, timeout)
        return self.results(cid)[count - 1]

    def _finished(self, cid: int) -> list[ev.ConversationEvent]:
        return [
            e for e in self.conversation if e.conversation_id == cid and type(e) is ev.TurnFinished
        ]

    def session_of(self, kind: type[ev.SessionEvent]) -> list[ev.SessionEvent]:
        with self._lock:
            return [e for e in self.session_events if type(e) is kind]


@pytest.fixture(scope="module")
def hybrid_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_arch_model(tmp_path_factory.mktemp("models") / "qwen35.gguf", "qwen35")


def test_two_conversations_at_once_give_what_each_gives_alone(
    make_session: Callable[..., tuple[Session, Recorder]], tiny_model: Path
) -> None:
    session, rec = make_session(tiny_model)
    for cid in (1, 2, 3, 4):
        rec.follow(cid)
    # alone, one after the other
    session.submit(1, [user("first conversation")], sampling=words(24, seed=1))
    alone_1 = rec.finish(1)
    session.submit(2, [user("second one")], sampling=words(24, seed=2))
    alone_2 = rec.finish(2)
    # together, in two fresh conversations
    session.submit(3, [user("first conversation")], sampling=words(24, seed=1))
    session.submit(4, [user("second one")], sampling=words(24, seed=2))
    together_1, together_2 = rec.finish(3), rec.finish(4)
    assert together_1.text == alone_1.text and together_2.text == alone_2.text
    assert together_1.n_tokens == alone_1.n_tokens > 0
    assert rec.text(3) == together_1.text  # the streamed pieces add up to the reply
    started = rec.of(3, ev.TurnStarted)
    assert started and isinstance(started[0], ev.TurnStarted) and started[0].n_to_process > 0
    stats = rec.session_of(ev.MemoryStats)
    assert stats and any(isinstance(s, ev.MemoryStats) and s.kv_bytes > 0 for s in stats)


def test_stop_then_the_conversation_works_again(
    make_session: Callable[..., tuple[Session, Recorder]], tiny_model: Path
) -> None:
    session, rec = make_session(tiny_model)
    rec.follow(1)
    session.submit(1, [user("talk")], sampling=words(4000, grammar=ENDLESS))
    rec.wait(lambda: len(rec.text(1)) > 0)
    session.stop(1)
    stopped = rec.finish(1, timeout=10.0)
    assert stopped.finish_reason is FinishReason.ABORTED and 0 < stopped.n_tokens < 4000
    # a stop before the turn ran cancels it
    turn = session.submit(1, [user("talk"), ChatMessage("assistant", "x"), user("more")])
    session.stop(1)
    cancelled = rec.finish(1, 2)
    assert cancelled.finish_reason is FinishReason.ABORTED and cancelled.n_tokens == 0
    finished = rec.of(1, ev.TurnFinished)[-1]
    assert isinstance(finished, ev.TurnFinished) and finished.turn_id == turn
    session.submit(1, [user("again")], sampling=words(6))
    assert rec.finish(1, 3).finish_reason in (FinishReason.EOG, FinishReason.LENGTH)


def test_regenerate_decodes_no_prompt_token(
    make_session: Callable[..., tuple[Session, Recorder]], tiny_model: Path
) -> None:
    session, rec = make_session(tiny_model)
    rec.follow(1)
    session.submit(1, [user("tell me")], sampling=words(10))
    first = rec.finish(1)
    session.regenerate(1, sampling=words(10, seed=99))
    again = rec.finish(1, 2)
    assert again.n_prompt == first.n_prompt and again.n_prompt_processed == 0
    # an edit of the message: a submit with the other history
    session.submit(1, [user("tell me more")], sampling=words(10))
    edited = rec.finish(1, 3)
    assert 0 < edited.n_prompt_processed < edited.n_prompt


def test_regenerate_without_a_turn_is_an_error(
    make_session: Callable[..., tuple[Session, Recorder]], tiny_model: Path
) -> None:
    session, rec = make_session(tiny_model)
    rec.follow(5)
    session.regenerate(5)
    result = rec.finish(5)
    assert result.finish_reason is FinishReason.ERROR and result.error
    assert rec.of(5, ev.TurnFailed)


@pytest.mark.parametrize("kind", ["attention", "hybrid"])
def test_fork_takes_over_the_cache_at_a_message_boundary(
    make_session: Callable[..., tuple[Session, Recorder]],
    tiny_model: Path,
    hybrid_model: Path,
    kind: str,
) -> None:
    session, rec = make_session(tiny_model if kind == "attention" else hybrid_model)
    rec.follow(1)
    rec.follow(2)
    session.submit(1, [user("first question")], system="be brief", sampling=words(8))
    first = rec.finish(1)
    history = [user("first question"), ChatMessage("assistant", first.text)]
    session.submit(1, [*history, user("second question")], system="be brief", sampling=words(8))
    rec.finish(1, 2)
    held = session.inspect(1).result(TIMEOUT).tokens
    session.fork(1, 2, history, system="be brief")
    rec.wait(lambda: bool(rec.of(2, ev.ConversationForked)))
    forked = rec.of(2, ev.ConversationForked)[0]
    assert isinstance(forked, ev.ConversationForked) and forked.source == 1
    copy = session.inspect(2).result(TIMEOUT).tokens
    assert 0 < forked.n_tokens < len(held)
    assert held[: forked.n_tokens] == copy[: forked.n_tokens]
    session.submit(2, [*history, user("another question")], system="be brief", sampling=words(8))
    c = rec.finish(2)
    assert c.n_prompt_processed < c.n_prompt - forked.n_tokens + 40
    # the source is untouched
    assert session.inspect(1).result(TIMEOUT).tokens == held


def test_close_mid_generation(
    make_session: Callable[..., tuple[Session, Recorder]], tiny_model: Path
) -> None:
    session, rec = make_session(tiny_model)
    rec.follow(1)
    session.submit(1, [user("talk")], sampling=words(100000, grammar=ENDLESS))
    rec.wait(lambda: len(rec.text(1)) > 0)
    session.close(1)
    result = rec.finish(1, timeout=10.0)
    assert result.finish_reason is FinishReason.ABORTED
    rec.wait(lambda: bool(rec.of(1, ev.ConversationClosed)))
    assert not session.inspect(1).result(TIMEOUT).open
    assert session.is_running


@pytest.mark.parametrize("kind", ["attention", "hybrid"])
def test_save_then_restore_in_a_new_session_gives_the_same_next_reply(
    make_session: Callable[..., tuple[Session, Recorder]],
    tiny_model: Path,
    hybrid_model: Path,
    kind: str,
) -> None:
    model = tiny_model if kind == "attention" else hybrid_model
    greedy = SamplingParams(temperature=0.0, max_tokens=8, grammar=WORDS)
    session, rec = make_session(model)
    rec.follow(1)
    session.submit(1, [user("remember this")], sampling=greedy)
    first = rec.finish(1)
    history = [user("remember this"), ChatMessage("assistant", first.text)]
    # the reply the next turn gives without a restore
    session.regenerate(1)
    rec.finish(1, 2)
    session.close(1, save=True)
    rec.wait(lambda: bool(rec.of(1, ev.ConversationClosed)))

    again, rec2 = make_session(model)
    rec2.follow(1)
    again.open(1)
    rec2.wait(lambda: bool(rec2.of(1, ev.CacheRestored)))
    restored = rec2.of(1, ev.CacheRestored)[0]
    assert isinstance(restored, ev.CacheRestored)
    assert restored.outcome is RestoreOutcome.RESTORED, restored.reason
    again.regenerate(1)  # no turn in this session yet: an error, the session goes on
    assert rec2.finish(1).finish_reason is FinishReason.ERROR
    again.submit(1, [user("remember this")], sampling=greedy)
    c = rec2.finish(1, 2)
    assert c.n_prompt_processed == 0 and c.text == first.text
    # and the next turn continues from the restored cache
    again.submit(1, [*history, user("what was it?")], sampling=greedy)
    follow = rec2.finish(1, 3)
    assert follow.n_prompt_processed < follow.n_prompt


def test_a_refused_state_file_is_reread(
    make_session: Callable[..., tuple[Session, Recorder]], tiny_model: Path
) -> None:
    session, rec = make_session(tiny_model)
    rec.follow(1)
    session.submit(1, [user("remember me")], sampling=words(6))
    rec.finish(1)
    session.close(1)
    rec.wait(lambda: bool(rec.of(1, ev.ConversationClosed)))
    other = ContextSettings.from_dict({**CONTEXT.to_dict(), "type_k": "f32"})
    again, rec2 = make_session(tiny_model, other)
    rec2.follow(1)
    again.open(1)
    rec2.wait(lambda: bool(rec2.of(1, ev.CacheRestored)))
    restored = rec2.of(1, ev.CacheRestored)[0]
    assert isinstance(restored, ev.CacheRestored)
    assert restored.outcome is RestoreOutcome.REREAD and restored.reason


def test_eviction_parks_to_disk_and_comes_back(
    make_session: Callable[..., tuple[Session, Recorder]], tiny_model: Path, store: StateStore
) -> None:
    settings = ContextSettings.from_dict({**CONTEXT.to_dict(), "n_seq_max": 2})
    session, rec = make_session(tiny_model, settings)
    firsts = []
    for cid in (1, 2, 3):
        rec.follow(cid)
        session.submit(cid, [user(f"conversation {cid}")], sampling=words(6))
        firsts.append(rec.finish(cid))
    rec.wait(lambda: bool(rec.of(1, ev.CacheParked)))
    parked = rec.of(1, ev.CacheParked)[0]
    assert isinstance(parked, ev.CacheParked) and parked.saved
    assert any(store.directory.glob("1-*.kvstate"))
    history = [user("conversation 1"), ChatMessage("assistant", firsts[0].text)]
    session.submit(1, [*history, user("back again")], sampling=words(6))
    c = rec.finish(1, 2)
    assert c.n_prompt - c.n_prompt_processed >= firsts[0].n_prompt - 1


def test_rebuild_keeps_every_conversation(
    make_session: Callable[..., tuple[Session, Recorder]], tiny_model: Path
) -> None:
    session, rec = make_session(tiny_model)
    for cid in (1, 2):
        rec.follow(cid)
        session.submit(cid, [user(f"conversation {cid}")], sampling=words(8))
        rec.finish(cid)
    before = {cid: session.inspect(cid).result(TIMEOUT).tokens for cid in (1, 2)}
    session.reconfigure(ContextSettings.from_dict({**CONTEXT.to_dict(), "n_ctx": 768}))
    rec.wait(lambda: bool(rec.session_of(ev.Reconfigured) or rec.session_of(ev.ReconfigureFailed)))
    done = rec.session_of(ev.Reconfigured)
    assert done and isinstance(done[0], ev.Reconfigured) and done[0].model.settings.n_ctx == 768
    after = {cid: session.inspect(cid).result(TIMEOUT).tokens for cid in (1, 2)}
    assert after == before
    # a bad setting is refused with a message, and nothing is lost
    session.reconfigure(ContextSettings.from_dict({**CONTEXT.to_dict(), "n_ctx": 10**9}))
    rec.wait(lambda: bool(rec.session_of(ev.ReconfigureFailed)))
    assert {cid: session.inspect(cid).result(TIMEOUT).tokens for cid in (1, 2)} == before


def test_policy_per_conversation(
    make_session: Callable[..., tuple[Session, Recorder]], tiny_model: Path
) -> None:
    session, _ = make_session(tiny_model)
    session.open(1, ContextFullPolicy.STOP)
    session.open(2)
    assert session.inspect(1).result(TIMEOUT).policy is ContextFullPolicy.STOP
    assert session.inspect(2).result(TIMEOUT).policy is None
    session.set_policy(2, ContextFullPolicy.SHIFT)
    session.set_default_policy(ContextFullPolicy.STOP)
    snapshot = session.inspect(2).result(TIMEOUT)
    assert snapshot.policy is ContextFullPolicy.SHIFT
    assert snapshot.default_policy is ContextFullPolicy.STOP
    # stored conversations kept it in their sampling JSON
    assert policy_of({"context_full_policy": "stop"}) is ContextFullPolicy.STOP
    assert policy_of({"context_full_policy": "bogus"}) is None and policy_of({}) is None


def test_a_bad_model_path_is_an_error_event_and_the_session_goes_on(
    make_session: Callable[..., tuple[Session, Recorder]], tiny_model: Path, tmp_path: Path
) -> None:
    session, rec = make_session()
    rec.follow(1)
    session.submit(1, [user("hello")])
    assert rec.finish(1).finish_reason is FinishReason.ERROR  # no model yet
    missing = tmp_path / "nothing-here.gguf"
    session.load_model(str(missing), CONTEXT)
    rec.wait(lambda: bool(rec.session_of(ev.ModelLoadFailed)))
    failed = rec.session_of(ev.ModelLoadFailed)[0]
    assert isinstance(failed, ev.ModelLoadFailed) and failed.path == str(missing)
    assert failed.message and not failed.cancelled
    garbage = tmp_path / "garbage.gguf"
    garbage.write_bytes(b"GGUF" + b"\x00" * 64)
    session.load_model(str(garbage), CONTEXT)
    rec.wait(lambda: len(rec.session_of(ev.ModelLoadFailed)) >= 2)
    assert session.is_running
    session.load_model(str(tiny_model), CONTEXT)
    rec.wait(lambda: bool(rec.session_of(ev.ModelLoaded)))
    loaded = rec.session_of(ev.ModelLoaded)[0]
    assert isinstance(loaded, ev.ModelLoaded) and loaded.model.path == str(tiny_model.resolve())
    session.submit(1, [user("hello")], sampling=words(4))
    assert rec.finish(1, 2).finish_reason in (FinishReason.EOG, FinishReason.LENGTH)


def test_partial_replies_are_saved_while_streaming(
    make_session: Callable[..., tuple[Session, Recorder]], tiny_model: Path
) -> None:
    db = Database.open()
    try:
        conversation = db.create_conversation()
        question = db.add_message(conversation.id, "user", "talk")
        reply = db.begin_reply(conversation.id, question.id)
        session, rec = make_session(tiny_model, database=db)
        rec.follow(conversation.id)
        session.submit(
            conversation.id,
            [user("talk")],
            sampling=words(100000, grammar=ENDLESS),
            reply_id=reply.id,
        )
        deadline = time.monotonic() + TIMEOUT
        saved = ""
        while not saved and time.monotonic() < deadline:
            time.sleep(0.1)
            saved = db.get_message(reply.id).content
        assert saved, "the reply was not saved while it streamed"
        assert db.get_message(reply.id).status == "partial"
        session.stop(conversation.id)
        rec.finish(conversation.id)
    finally:
        db.close()


def test_shutdown_is_bounded_and_saves(
    make_session: Callable[..., tuple[Session, Recorder]], tiny_model: Path, store: StateStore
) -> None:
    session, rec = make_session(tiny_model)
    rec.follow(1)
    rec.follow(2)
    session.submit(1, [user("quiet")], sampling=words(6))
    rec.finish(1)
    session.submit(2, [user("talk")], sampling=words(100000, grammar=ENDLESS))
    rec.wait(lambda: len(rec.text(2)) > 0)
    started = time.monotonic()
    session.shutdown()
    assert session.join(5.0)
    assert time.monotonic() - started < 3.0
    assert rec.session_of(ev.ShutdownComplete)
    assert rec.results(2)[-1].finish_reason is FinishReason.ABORTED
    assert any(store.directory.glob("1-*.kvstate")) and any(store.directory.glob("2-*.kvstate"))
