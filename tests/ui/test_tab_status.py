"""The chat tab's status line: its text and tooltip come from the tab's state and the
cache note of the session's figures (tab_status), never one from the other."""

from __future__ import annotations

from typing import Any

import pytest

from app.ui.tab_status import (
    RESTORE_REASON_CHARS,
    CacheNote,
    TabState,
    cache_note,
    state_text,
    state_tip,
)


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
    assert cache_note(info) is note


def test_what_the_tab_does_in_words() -> None:
    assert state_text(TabState.QUEUED, (0, 0), 0.0, {}) == "waiting…"
    assert state_text(TabState.PROMPT, (25, 100), 0.0, {}) == "processing prompt 25%"
    assert state_text(TabState.PROMPT, (0, 0), 0.0, {}) == "processing prompt 0%"
    assert state_text(TabState.GENERATING, (0, 0), 12.34, {}) == "generating at 12.3 tok/s"
    assert state_text(TabState.GENERATING, (0, 0), 0.0, {}) == "generating"
    assert state_text(TabState.IDLE, (0, 0), 0.0, {}) == "idle"
    assert state_text(TabState.IDLE, (0, 0), 0.0, {"on_disk": True}) == "idle · saved to disk"
    long = "x" * (RESTORE_REASON_CHARS + 40)
    text = state_text(TabState.IDLE, (0, 0), 0.0, {"restore_error": long})
    assert text.startswith("idle · cache re-processed: x") and text.endswith("…")
    assert len(text) == len("idle · cache re-processed: ") + RESTORE_REASON_CHARS


def test_the_tooltip_comes_from_the_state_not_the_text() -> None:
    # a reason that reads like another note's words changes nothing
    reread = {"restore_error": "waiting for room in the context"}
    tip = state_tip(TabState.IDLE, reread)
    assert tip.startswith("The saved cache of this conversation could not be used")
    assert tip.endswith(": waiting for room in the context")
    parked = {"parked": "2 chats are busy", "restore_error": "old"}
    assert state_tip(TabState.IDLE, parked).endswith("next send here: 2 chats are busy")
    # while the tab works, or with nothing to explain, there is no tooltip
    assert state_tip(TabState.GENERATING, reread) == ""
    assert state_tip(TabState.PROMPT, parked) == ""
    assert state_tip(TabState.IDLE, {"restored": True}) == ""
    assert state_tip(TabState.IDLE, {}) == ""
