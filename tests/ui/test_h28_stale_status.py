"""Clipped or stale status texts (issue 28, item 6), in the real window on the tiny model:
a long state ends with "…" (its whole text in the tooltip) instead of being cut mid-word;
a label set while its tab was hidden gets its width when shown; "cache restored from disk"
goes once a turn has run; deleting the last reply updates the meter and offers to answer
the user message left without one."""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QMessageBox, QPushButton, QWidget

from app.ui.message_delete import ANSWER, HANGING
from app.ui.status_text import ElidedLabel, IsolatedLabel
from tests.ui.conftest import WORDS_GRAMMAR, close_window, send, set_sampling, settle, wait_idle
from tests.ui.test_polish_delete_message import question, widget_of


def test_a_long_state_ends_with_an_ellipsis_not_mid_word(qtbot: Any) -> None:
    label = ElidedLabel("idle · cache restored from disk · on loopback · LlamaDesk")
    qtbot.addWidget(label)
    label.resize(120, 20)
    label.show()
    settle()
    assert label.elided()
    assert label.text().endswith("LlamaDesk")  # the text stays whole, only drawn short
    label.resize(2000, 20)
    assert not label.elided()


def test_a_text_set_while_hidden_gets_its_width_when_shown(qtbot: Any) -> None:
    row = QWidget()
    qtbot.addWidget(row)
    from PySide6.QtWidgets import QHBoxLayout

    layout = QHBoxLayout(row)
    label = QLabel("~5")
    isolated = IsolatedLabel(label, row)
    layout.addWidget(isolated)
    layout.addStretch(1)
    row.resize(600, 30)
    row.show()
    settle()
    row.hide()
    label.setText("~520 / 4,096 tokens · not cached yet")  # a reopened tab, not shown yet
    row.show()
    settle()
    assert isolated.width() >= label.sizeHint().width()


def test_restored_from_disk_goes_after_a_turn(qtbot: Any, make_window: Any) -> None:
    # one resident chat: the other's cache is restored when it is next used (at its send)
    window, _ = make_window(context={"n_seq_max": 1})
    tabs = [window.new_tab() for _ in range(2)]
    for tab in tabs:
        set_sampling(tab, grammar=WORDS_GRAMMAR, max_tokens=3)
        send(qtbot, tab, "hello there")
        wait_idle(qtbot, tab)
    close_window(qtbot, window)
    again, _ = make_window(write=False)
    for tab in reversed(tabs):
        reopened = again.tab_for(tab.cid)
        assert reopened is not None
        again.tabs_ui.tab_widget.setCurrentWidget(reopened)
        send(qtbot, reopened, "and again")
        wait_idle(qtbot, reopened)
        settle()
        assert "restored" not in reopened.state_label.text(), reopened.info


def test_deleting_the_last_reply_updates_the_meter_and_offers_an_answer(
    qtbot: Any, make_window: Any
) -> None:
    window, _ = make_window()
    tab = window.new_tab()
    set_sampling(tab, grammar=WORDS_GRAMMAR, max_tokens=8, temperature=0)
    send(qtbot, tab, "a question left hanging")
    wait_idle(qtbot, tab)
    qtbot.waitUntil(lambda: tab.info.n_tokens > 0, timeout=5000)
    counted = tab.meter_label.text()
    reply = tab.view.last()
    assert reply is not None and reply.data.role == "assistant"
    qtbot.mouseClick(reply.delete_button, Qt.MouseButton.LeftButton)
    box = question(qtbot, tab)
    confirm = box.findChild(QPushButton, "delete-message-confirm")
    assert confirm is not None
    confirm.click()
    qtbot.waitUntil(lambda: len(tab.branch) == 1, timeout=5000)
    assert tab.meter_label.text() != counted and tab.meter_label.text().startswith("~")
    assert tab.notice.isVisible() and tab.notice.label.text() == HANGING
    answer = [b for b in tab.notice.findChildren(QPushButton) if b.text() == ANSWER]
    assert answer
    answer[0].click()
    wait_idle(qtbot, tab)
    assert [m.role for m in tab.branch] == ["user", "assistant"]
    assert widget_of(tab, "a question left hanging") is not None
    assert not tab.meter_label.text().startswith("~")  # counted again by the session
    assert isinstance(box, QMessageBox)
