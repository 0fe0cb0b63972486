"""What a conversation's status says about its cache is what happened (issue 14, item 3):
restored, parked until there is room, or re-read from text with the reason; llama.cpp is
never asked to restore a cache the context has no room for."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from app.engine import ContextSettings, SamplingParams
from app.session import ChatMessage, ContextFullPolicy, RestoreOutcome, Session
from app.session import events as ev
from tests.session.test_session import CONTEXT, ENDLESS, TIMEOUT, WORDS, Recorder, user

GREEDY = SamplingParams(temperature=0.0, max_tokens=8, grammar=WORDS)
SMALL = ContextSettings.from_dict({**CONTEXT.to_dict(), "n_ctx": 256})


def _long(i: int) -> ChatMessage:
    return user(" ".join([f"conversation {i} says hello to the world of llamas"] * 3))


def _restored(rec: Recorder, cid: int) -> list[ev.CacheRestored]:
    return [e for e in rec.of(cid, ev.CacheRestored) if isinstance(e, ev.CacheRestored)]


def test_restart_into_a_smaller_context_restores_parks_and_says_which(
    make_session: Callable[..., tuple[Session, Recorder]],
    tiny_model: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    session, rec = make_session(tiny_model)
    follow_ups = {}
    for cid in (1, 2):
        rec.follow(cid)
        session.submit(cid, [_long(cid)], sampling=GREEDY)
        first = rec.finish(cid)
        history = [_long(cid), ChatMessage("assistant", first.text), user("and then")]
        session.submit(cid, history, sampling=GREEDY)
        follow_ups[cid] = (history, rec.finish(cid, 2))
        session.close(cid, save=True)
        rec.wait(lambda: bool(rec.of(cid, ev.ConversationClosed)))  # noqa: B023 (waited here)
    assert all(150 <= r.n_prompt < 230 for _, r in follow_ups.values()), [
        r.n_prompt for _, r in follow_ups.values()
    ]

    again, rec2 = make_session(tiny_model, SMALL)  # room for one of them at a time
    for cid in (1, 2):
        rec2.follow(cid)
    again.open(1)
    rec2.wait(lambda: bool(_restored(rec2, 1)))
    assert _restored(rec2, 1)[0].outcome is RestoreOutcome.RESTORED
    history, expected = follow_ups[1]
    again.submit(1, history, sampling=GREEDY)
    result = rec2.finish(1)
    assert result.text == expected.text and result.n_prompt_processed <= 1
    # While conversation 1 writes (its cells busy), conversation 2's cache has no room.
    endless = SamplingParams(temperature=0.8, seed=1, max_tokens=100_000, grammar=ENDLESS)
    again.set_policy(1, ContextFullPolicy.SHIFT)
    streamed = len(rec2.of(1, ev.TextStreamed))
    go_on = [*history, ChatMessage("assistant", result.text), user("go on")]
    again.submit(1, go_on, sampling=endless)
    rec2.wait(lambda: len(rec2.of(1, ev.TextStreamed)) > streamed)
    again.open(2)
    rec2.wait(lambda: bool(_restored(rec2, 2)))
    parked = _restored(rec2, 2)[0]
    assert parked.outcome is RestoreOutcome.PARKED and parked.reason
    again.stop(1)
    rec2.finish(1, 2)
    # Used now: restored (conversation 1 leaves for its parked state), said so, and the
    # reply is the uninterrupted one with nothing of its prompt decoded again.
    history, expected = follow_ups[2]
    again.submit(2, history, sampling=GREEDY)
    result = rec2.finish(2)
    assert [e.outcome for e in _restored(rec2, 2)] == [
        RestoreOutcome.PARKED,
        RestoreOutcome.RESTORED,
    ]
    assert result.text == expected.text and result.n_prompt_processed <= 1
    assert rec2.of(1, ev.CacheParked)
    assert "available cells" not in caplog.text
    assert "failed to restore" not in caplog.text


def test_a_smaller_rebuilt_context_says_a_cache_no_longer_fits_and_rereads_it(
    make_session: Callable[..., tuple[Session, Recorder]], tiny_model: Path
) -> None:
    session, rec = make_session(tiny_model)
    rec.follow(1)
    history = [_long(1)]
    for turn in range(2):
        session.submit(1, history, sampling=GREEDY)
        reply = rec.finish(1, turn + 1)
        history = [*history, ChatMessage("assistant", reply.text), _long(turn + 2)]
    held = len(session.inspect(1).result(TIMEOUT).tokens)
    assert held >= 256
    assert [e.outcome for e in _restored(rec, 1)] == [RestoreOutcome.EMPTY]  # when opened
    session.reconfigure(SMALL)
    rec.wait(lambda: len(_restored(rec, 1)) == 2)
    lost = _restored(rec, 1)[1]
    assert lost.outcome is RestoreOutcome.REREAD
    assert lost.reason and "no longer fits" in lost.reason and f"{held:,}" in lost.reason
    # Read again from its text, fitted to the new context: the meter says what it holds
    # and reserves, and where the earlier messages fell out.
    session.submit(1, history, sampling=GREEDY)
    result = rec.finish(1, 3)
    assert result.error is None and result.n_prompt_processed == result.n_prompt
    rec.wait(
        lambda: any(
            isinstance(e, ev.SequenceStatus) and e.n_dropped for e in rec.of(1, ev.SequenceStatus)
        )
    )
    status = [e for e in rec.of(1, ev.SequenceStatus) if isinstance(e, ev.SequenceStatus)][-1]
    assert status.n_ctx == 256 and status.n_dropped >= 1
    assert status.n_reserved == GREEDY.max_tokens
    assert status.n_tokens + status.n_reserved <= 256
