"""The chat tab's status line: its text and tooltip come from the tab's state and the
cache note of the session's figures (tab_status), never one from the other."""

from __future__ import annotations

from typing import Any

import pytest

from app.session import ConversationId, RestoreOutcome
from app.session import events as ev
from app.ui.tab_status import (
    RESTORE_REASON_CHARS,
    CacheNote,
    TabFigures,
    TabState,
    cache_note,
    state_text,
    state_tip,
)


def F(**values: Any) -> TabFigures:
    return TabFigures(**values)


@pytest.mark.parametrize(
    ("info", "note"),
    [
        ({}, CacheNote.NONE),
        ({"on_disk": True, "restored": True}, CacheNote.ON_DISK),
        ({"restored": True, "parked": "busy"}, CacheNote.RESTORED),
        ({"parked": "busy", "restore_error": "bad"}, CacheNote.PARKED),
        ({"restore_error": "bad"}, CacheNote.REREAD),
        ({"restore_error": None, "parked": None, "restored": False}, CacheNote.NONE),
    ],
)
def test_the_cache_note_is_the_first_that_applies(info: dict[str, Any], note: CacheNote) -> None:
    assert cache_note(TabFigures(**info)) is note


def test_what_the_tab_does_in_words() -> None:
    assert state_text(TabState.QUEUED, (0, 0), 0.0, F()) == "waiting…"
    assert state_text(TabState.PROMPT, (25, 100), 0.0, F()) == "processing prompt 25%"
    assert state_text(TabState.PROMPT, (0, 0), 0.0, F()) == "processing prompt 0%"
    assert state_text(TabState.GENERATING, (0, 0), 12.34, F()) == "generating at 12.3 tok/s"
    assert state_text(TabState.GENERATING, (0, 0), 0.0, F()) == "generating"
    assert state_text(TabState.IDLE, (0, 0), 0.0, F()) == "idle"
    assert state_text(TabState.IDLE, (0, 0), 0.0, F(on_disk=True)) == "idle · saved to disk"
    long = "x" * (RESTORE_REASON_CHARS + 40)
    text = state_text(TabState.IDLE, (0, 0), 0.0, F(restore_error=long))
    assert text.startswith("idle · cache re-processed: x") and text.endswith("…")
    assert len(text) == len("idle · cache re-processed: ") + RESTORE_REASON_CHARS


def test_the_tooltip_comes_from_the_state_not_the_text() -> None:
    # a reason that reads like another note's words changes nothing
    reread = F(restore_error="waiting for room in the context")
    tip = state_tip(TabState.IDLE, reread)
    assert tip.startswith("The saved cache of this conversation could not be used")
    assert tip.endswith(": waiting for room in the context")
    parked = F(parked="2 chats are busy", restore_error="old")
    assert state_tip(TabState.IDLE, parked).endswith("next send here: 2 chats are busy")
    # while the tab works, or with nothing to explain, there is no tooltip
    assert state_tip(TabState.GENERATING, reread) == ""
    assert state_tip(TabState.PROMPT, parked) == ""
    assert state_tip(TabState.IDLE, F(restored=True)) == ""
    assert state_tip(TabState.IDLE, F()) == ""


def test_the_sessions_events_set_the_figures() -> None:
    cid = ConversationId(1)
    status = ev.SequenceStatus(cid, 40, 512, True, False, False, n_reserved=100, n_dropped=2)
    figures = TabFigures().apply(ev.CacheParked(cid, saved=True))
    assert figures.on_disk and not figures.resident
    figures = figures.apply(status)  # back in the context: no longer only on disk
    assert (figures.n_tokens, figures.n_ctx, figures.n_reserved, figures.n_dropped) == (
        40,
        512,
        100,
        2,
    )
    assert figures.resident and not figures.on_disk
    refused = figures.apply(ev.CacheRestored(cid, RestoreOutcome.REREAD, "another model"))
    assert refused.restore_error == "another model" and cache_note(refused) is CacheNote.REREAD
    assert cache_note(refused.turn_started()) is CacheNote.NONE
    assert refused.apply(ev.ConversationForked(cid, ConversationId(2), 30)).forked
    assert refused.unloaded().n_ctx == 0


def test_the_room_for_a_message_does_not_contradict_itself() -> None:
    from app.ui.tab_status import room_text, tokens_text

    assert tokens_text(1) == "1 token" and tokens_text(6144) == "6,144 tokens"
    # no reserve: no "rest kept for the reply" beside "6,144 of its 6,144"
    assert room_text(6144, 0) == "its 6,144 tokens"
    assert room_text(6144, 1024) == "5,120 of its 6,144 tokens, 1,024 kept for the reply"
