"""Issue 28 item 1: the window changes its conversations through the session (its
library), so no SQLite write runs on the GUI thread. Every connection opened during the
test is traced (sqlite3's trace callback runs on the thread that runs the statement); a
write statement on the Qt main thread fails the test, and so does any statement on the
conversations' tables. The GUI thread's remaining statements (the model library's) are
counted and printed (the figure the issue's closing note asks for)."""

from __future__ import annotations

import re
import sqlite3
import threading
from typing import Any

import pytest

from tests.ui.conftest import close_window, send, wait_idle

WRITE_VERBS = ("INSERT", "UPDATE", "DELETE", "REPLACE")
CONVERSATION_TABLES = re.compile(r"\b(conversations|messages|messages_fts|tabs)\b", re.IGNORECASE)


class GuiSql:
    """The SQL statements of every connection opened from now on, by thread."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.gui: list[str] = []
        self.other = 0
        self._lock = threading.Lock()
        original = sqlite3.connect

        def traced(*args: Any, **kwargs: Any) -> sqlite3.Connection:
            conn: sqlite3.Connection = original(*args, **kwargs)
            conn.set_trace_callback(self._seen)
            return conn

        monkeypatch.setattr(sqlite3, "connect", traced)

    def _seen(self, sql: str) -> None:  # on the thread that runs it
        with self._lock:
            if threading.current_thread() is threading.main_thread():
                self.gui.append(" ".join(sql.split()))
            else:
                self.other += 1

    def mark(self) -> int:
        with self._lock:
            return len(self.gui)

    def conversation_sql_since(self, mark: int) -> list[str]:
        """The GUI thread's statements on the conversations' tables (reads too)."""
        with self._lock:
            return [s for s in self.gui[mark:] if CONVERSATION_TABLES.search(s)]

    def writes_since(self, mark: int) -> list[str]:
        with self._lock:
            return [s for s in self.gui[mark:] if s.upper().startswith(WRITE_VERBS)]


def test_no_conversation_write_runs_on_the_gui_thread(
    qtbot: Any, make_window: Any, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    sql = GuiSql(monkeypatch)
    # From the window's first action to its close (the database's opening, on the GUI
    # thread in main.py as in make_window, and the model library come before: left).
    window, _ = make_window()
    start = sql.mark()
    tab = window.new_tab()
    assert tab is not None
    send(qtbot, tab, "Hello")
    wait_idle(qtbot, tab)
    qtbot.waitUntil(lambda: len(tab.branch) == 2, timeout=10000)
    cid = tab.cid
    _, sampling = tab.settings.values()
    tab.settings.set_values("Answer in one word.", sampling)
    tab.save_settings()
    assert tab.conversation.system_prompt == "Answer in one word."
    window.rename_conversation(cid, "Greetings")
    window.conversations_ui.pin(cid, True)
    window.fork_from(tab, tab.branch[0].id)
    forked = window.current_tab()
    assert forked is not None and forked.cid != cid
    window.conversations_ui.show_match(cid, tab.branch[0].id)
    window.save_tabs()
    window.delete_conversation(cid)
    window.conversations_ui.undo_delete([cid])
    empty = window.new_tab()
    assert empty is not None
    window.close_tab(window.tab_widget.indexOf(empty))  # an unused chat goes for good
    window.save_tabs()

    writes = sql.writes_since(start)
    reads = sql.mark() - start - len(writes)
    with capsys.disabled():
        print(f"\nGUI-thread SQLite: {len(writes)} writes, {reads} reads; {sql.other} off it")
    assert writes == [], "\n".join(writes)
    # nor any read of a conversation (what is left there is the model library's list)
    conversation_sql = sql.conversation_sql_since(start)
    assert conversation_sql == [], "\n".join(conversation_sql)
    # the changes happened (read back through the session's library)
    door = window.session.library
    conversation = door.conversation(cid).result(5)
    assert conversation.title == "Greetings" and conversation.pinned
    assert conversation.system_prompt == "Answer in one word."
    assert empty.cid not in [c.id for c in door.listing().result(5)]
    close_window(qtbot, window)
    conversation_sql = sql.conversation_sql_since(start)
    assert conversation_sql == [], "\n".join(conversation_sql)
