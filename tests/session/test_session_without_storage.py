"""A session with nothing persisted, as ``llamadesk run`` drives it: plain-text turns,
state files at paths of the client's own, turns that start together, loads that do not
fall back to the default settings."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.engine import ContextSettings, Engine, SamplingParams
from app.errors import LlamaDeskError
from app.session import ConversationId, FinishReason, RestoreOutcome, Session
from app.session import events as ev
from tests.session.test_session import CONTEXT, ENDLESS, TIMEOUT, Recorder, user, words

GREEDY = SamplingParams(temperature=0.0, max_tokens=12)


@pytest.fixture
def session() -> Iterator[Session]:
    session = Session()  # no state store, no database
    yield session
    session.shutdown()
    assert session.join(10.0)


def loaded(session: Session, model: Path, settings: ContextSettings = CONTEXT) -> Recorder:
    rec = Recorder(session)
    session.load_model(str(model), settings)
    rec.wait(lambda: bool(rec.session_of(ev.ModelLoaded)))
    return rec


def engine_tokens(model: Path, text: str, params: SamplingParams) -> list[int]:
    with Engine.open(model, CONTEXT) as engine:
        key = engine.open_sequence()
        engine.set_prompt(key, text, raw=True)
        return engine.complete(key, params).tokens


def test_a_text_turn_is_the_raw_prompt_and_its_result_has_the_tokens(
    session: Session, tiny_model: Path
) -> None:
    rec = loaded(session, tiny_model)
    rec.follow(1)
    session.submit_text(1, "hello world", GREEDY)
    result = rec.finish(1)
    assert result.finish_reason is FinishReason.LENGTH
    assert list(result.tokens) == engine_tokens(tiny_model, "hello world", GREEDY)
    assert len(result.tokens) == result.n_tokens == 12
    assert rec.text(1) == result.text
    # a text turn is not one a regenerate repeats
    session.regenerate(1)
    assert rec.finish(1, 2).error == "There is no turn to regenerate yet."


def test_a_chat_turn_result_has_its_tokens_too(session: Session, tiny_model: Path) -> None:
    rec = loaded(session, tiny_model)
    rec.follow(1)
    session.submit(1, [user("hello")], sampling=GREEDY)
    result = rec.finish(1)
    assert len(result.tokens) == result.n_tokens > 0


def test_save_and_restore_a_state_file_then_go_on(
    session: Session, tiny_model: Path, tmp_path: Path
) -> None:
    rec = loaded(session, tiny_model)
    for cid in (1, 2, 3):
        rec.follow(cid)
    long = SamplingParams(temperature=0.0, max_tokens=24)
    session.submit_text(1, "hello world the model", long)
    whole = rec.finish(1)
    half = SamplingParams(temperature=0.0, max_tokens=12)
    session.submit_text(2, "hello world the model", half)
    first = rec.finish(2)
    path = tmp_path / "two.state"
    size = session.save_state_file(2, str(path)).result(TIMEOUT)
    assert size == path.stat().st_size > 0

    restored = session.restore_state_file(3, str(path)).result(TIMEOUT)
    assert restored == ev.CacheRestored(ConversationId(3), RestoreOutcome.RESTORED)
    assert restored in rec.of(3, ev.CacheRestored)
    snapshot = session.inspect(3).result(TIMEOUT)
    assert snapshot.open and len(snapshot.tokens) == first.n_prompt + 12 - 1
    session.submit_text(3, "", half, append=True)  # go on from the cache
    second = rec.finish(3)
    if len(whole.tokens) == 24:
        assert first.tokens + second.tokens == whole.tokens
        assert first.text + second.text == whole.text


def test_a_refused_or_missing_state_file_leaves_the_conversation_empty(
    session: Session, tiny_model: Path, tmp_path: Path
) -> None:
    rec = loaded(session, tiny_model)
    rec.follow(1)
    session.submit_text(1, "hello", GREEDY)
    rec.finish(1)
    path = tmp_path / "s.state"
    session.save_state_file(1, str(path)).result(TIMEOUT)
    data = bytearray(path.read_bytes())
    data[-10] ^= 0xFF
    path.write_bytes(bytes(data))
    for cid, target in ((2, path), (3, tmp_path / "missing.state")):
        restored = session.restore_state_file(cid, str(target)).result(TIMEOUT)
        assert restored.outcome is RestoreOutcome.REREAD and restored.reason
        assert session.inspect(cid).result(TIMEOUT).tokens == ()


def test_state_file_errors_come_back_in_the_future(
    session: Session, tiny_model: Path, tmp_path: Path
) -> None:
    with pytest.raises(LlamaDeskError, match="No model is loaded"):
        session.save_state_file(1, str(tmp_path / "x")).result(TIMEOUT)
    with pytest.raises(LlamaDeskError, match="No model is loaded"):
        session.restore_state_file(1, str(tmp_path / "x")).result(TIMEOUT)
    rec = loaded(session, tiny_model)
    with pytest.raises(LlamaDeskError, match="not open"):
        session.save_state_file(7, str(tmp_path / "x")).result(TIMEOUT)
    rec.follow(1)
    session.submit_text(1, "hello", words(4000, grammar=ENDLESS))
    rec.wait(lambda: len(rec.text(1)) > 0)
    with pytest.raises(LlamaDeskError, match="still answering"):
        session.save_state_file(1, str(tmp_path / "x")).result(TIMEOUT)
    session.stop(1)
    assert rec.finish(1).finish_reason is FinishReason.ABORTED
    session.save_state_file(1, str(tmp_path / "x")).result(TIMEOUT)
    with pytest.raises(LlamaDeskError, match="cannot be written"):
        session.save_state_file(1, str(tmp_path)).result(TIMEOUT)  # a folder


def test_turns_submitted_in_a_batch_start_before_the_first_step(
    session: Session, tiny_model: Path
) -> None:
    rec = loaded(session, tiny_model)
    order: list[tuple[str, int]] = []
    lock = threading.Lock()

    def on_event(event: ev.ConversationEvent) -> None:
        with lock:
            order.append((type(event).__name__, event.conversation_id))

    for cid in (1, 2, 3):
        rec.follow(cid)
        session.subscribe(cid, on_event)
    with session.batch():
        for cid in (1, 2, 3):
            session.submit_text(cid, "one two", GREEDY)
            time.sleep(0.2)  # the session thread would have stepped by now
        # commands are still handled while the batch is open
        assert session.inspect(1).result(TIMEOUT).open
    results = [rec.finish(cid) for cid in (1, 2, 3)]
    with lock:
        kinds = [kind for kind, _ in order]
    started = [i for i, kind in enumerate(kinds) if kind == "TurnStarted"]
    stepped = [i for i, kind in enumerate(kinds) if kind in ("TextStreamed", "PromptProgressed")]
    assert len(started) == 3 and max(started) < min(stepped), order
    assert results[0].tokens == results[1].tokens == results[2].tokens


def test_a_load_without_fallback_fails_on_settings_the_model_refuses(
    session: Session, tiny_model: Path
) -> None:
    rec = Recorder(session)
    refused = ContextSettings.from_dict({**CONTEXT.to_dict(), "type_k": "q8_0"})  # head size 16
    session.load_model(str(tiny_model), refused, fallback=False)
    rec.wait(lambda: bool(rec.session_of(ev.ModelLoadFailed)))
    (failed,) = rec.session_of(ev.ModelLoadFailed)
    assert isinstance(failed, ev.ModelLoadFailed) and "head size" in failed.message
    assert not rec.session_of(ev.ModelLoaded)
    session.load_model(str(tiny_model), refused)  # the default: fall back, with a warning
    rec.wait(lambda: bool(rec.session_of(ev.ModelLoaded)))
    (ok,) = rec.session_of(ev.ModelLoaded)
    assert isinstance(ok, ev.ModelLoaded) and ok.warning and "default" in ok.warning


def test_engine_calls_and_token_prompts(session: Session, tiny_model: Path) -> None:
    from app.session import NoModelError

    with pytest.raises(NoModelError):
        session.call(lambda engine: engine.tokenize("hello")).result(TIMEOUT)
    rec = loaded(session, tiny_model)
    tokens = session.call(lambda engine: engine.tokenize("hello world")).result(TIMEOUT)
    assert tokens and all(isinstance(t, int) for t in tokens)
    with pytest.raises(LlamaDeskError):  # the function's own error comes back
        session.call(lambda engine: engine.detokenize([10**9])).result(TIMEOUT)
    rec.follow(1)
    session.submit_tokens(1, tuple(tokens), GREEDY)
    result = rec.finish(1)
    assert list(result.tokens) == engine_tokens(tiny_model, "hello world", GREEDY)
