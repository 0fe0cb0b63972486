"""The window's reply is committed before the tab shows it finished, and not on the GUI
thread (issue 27, item 4): at the moment the tab handles the turn's end, a connection of
its own (which sees only committed rows) reads the whole reply, complete."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from app.session import TurnResult
from app.session.recorder import Recorder as SessionRecorder
from app.storage import Database
from app.ui.tab_turn import TabTurn
from tests.ui.conftest import send, set_sampling, wait_idle


def test_the_reply_is_committed_off_the_gui_thread_before_the_tab_finishes(
    qtbot: Any, make_window: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    written_on: list[threading.Thread] = []
    seen_at_finish: list[tuple[str, str, str]] = []
    finish_reply = SessionRecorder.finish_reply
    on_finished = TabTurn.on_finished

    def spy_finish(self: SessionRecorder, *args: Any, **kwargs: Any) -> Any:
        written_on.append(threading.current_thread())
        return finish_reply(self, *args, **kwargs)

    def spy_on_finished(self: TabTurn, result: TurnResult) -> None:
        reply_id = self.tab.reply_id
        if reply_id is not None:
            other = Database.open()  # its own connection: committed rows only
            try:
                stored = other.get_message(reply_id)
                seen_at_finish.append((stored.status, stored.content, result.text))
            finally:
                other.close()
        on_finished(self, result)

    monkeypatch.setattr(SessionRecorder, "finish_reply", spy_finish)
    monkeypatch.setattr(TabTurn, "on_finished", spy_on_finished)
    window, _ = make_window()
    tab = window.new_tab()
    set_sampling(tab, max_tokens=24, temperature=0.7, seed=4)
    send(qtbot, tab, "hello world")
    completion = wait_idle(qtbot, tab)
    assert completion.n_tokens > 0
    assert len(seen_at_finish) == 1
    status, content, text = seen_at_finish[0]
    assert status == "complete" and content == text == completion.text
    assert written_on and all(t is not threading.main_thread() for t in written_on)
