"""A single message can be deleted (issue 20, item 6): its header's Delete asks first and
says what becomes of the messages below it (they stay, joined to the message above); the
session deletes it; the next reply's prompt no longer holds its text (real engine); not
while the tab answers."""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QMessageBox, QPushButton

from app.ui.message_delete import WITH_REPLIES
from tests.ui.conftest import (
    ENDLESS_GRAMMAR,
    WORDS_GRAMMAR,
    held_tokens,
    send,
    set_sampling,
    wait_idle,
)


def widget_of(tab: Any, text: str) -> Any:
    for widget in tab.view.messages():
        if widget.data.content == text:
            return widget
    raise AssertionError(f"{text!r} is not shown")


def question(qtbot: Any, tab: Any) -> QMessageBox:
    qtbot.waitUntil(lambda: tab.findChild(QMessageBox, "delete-message") is not None, timeout=3000)
    box = tab.findChild(QMessageBox, "delete-message")
    assert isinstance(box, QMessageBox)
    qtbot.waitUntil(box.isVisible, timeout=3000)
    return box


def prompt_text(qtbot: Any, window: Any, tab: Any) -> str:
    tokens = held_tokens(qtbot, window, tab)
    future = window.session.call(lambda engine: engine.detokenize(tokens))
    qtbot.waitUntil(future.done, timeout=10000)
    text = future.result()
    assert isinstance(text, str)
    return text


def test_one_message_is_deleted_and_the_next_prompt_lacks_it(qtbot: Any, make_window: Any) -> None:
    window, _ = make_window()
    tab = window.new_tab()
    assert tab is not None
    set_sampling(tab, grammar=WORDS_GRAMMAR, max_tokens=3, temperature=0)
    send(qtbot, tab, "keep this first")
    wait_idle(qtbot, tab)
    send(qtbot, tab, "secret zebra words")
    wait_idle(qtbot, tab)
    assert "secret zebra words" in prompt_text(qtbot, window, tab)
    replies = [w.data.id for w in tab.view.messages() if w.data.role == "assistant"]

    # Cancel keeps it
    widget = widget_of(tab, "secret zebra words")
    qtbot.mouseClick(widget.delete_button, Qt.MouseButton.LeftButton)
    box = question(qtbot, tab)
    assert box.text() == WITH_REPLIES  # says what becomes of the reply below it
    box.button(QMessageBox.StandardButton.Cancel).click()
    qtbot.wait(50)
    assert "secret zebra words" in [w.data.content for w in tab.view.messages()]

    # Delete deletes just that message: its reply stays, after the message above it (an
    # edit of it under way ends)
    tab.edit(widget_of(tab, "secret zebra words").data.id)
    assert tab.edit_banner.isVisibleTo(tab)
    qtbot.mouseClick(widget_of(tab, "secret zebra words").delete_button, Qt.MouseButton.LeftButton)
    box = question(qtbot, tab)
    confirm = box.findChild(QPushButton, "delete-message-confirm")
    assert confirm is not None
    confirm.click()
    qtbot.waitUntil(
        lambda: "secret zebra words" not in [w.data.content for w in tab.view.messages()],
        timeout=5000,
    )
    assert [w.data.id for w in tab.view.messages() if w.data.role == "assistant"] == replies
    assert all(m.content != "secret zebra words" for m in window.db.get_thread(tab.cid))
    assert not tab.edit_banner.isVisibleTo(tab)
    tab.composer.clear()

    # the next turn re-reads from there: its prompt holds the first message, not the deleted
    send(qtbot, tab, "after the delete")
    result = wait_idle(qtbot, tab)
    assert result.error is None
    text = prompt_text(qtbot, window, tab)
    assert "keep this first" in text and "after the delete" in text
    assert "secret zebra" not in text


def test_no_delete_while_the_tab_answers(qtbot: Any, make_window: Any) -> None:
    window, _ = make_window()
    tab = window.new_tab()
    assert tab is not None
    set_sampling(tab, grammar=WORDS_GRAMMAR, max_tokens=3, temperature=0)
    send(qtbot, tab, "an earlier message")
    wait_idle(qtbot, tab)
    set_sampling(tab, grammar=ENDLESS_GRAMMAR, max_tokens=100000, temperature=0.8, seed=3)
    send(qtbot, tab, "a long answer please")
    qtbot.waitUntil(lambda: tab.generating and len(tab.view.messages()) == 4, timeout=10000)
    for text in ("an earlier message", "a long answer please"):
        assert not widget_of(tab, text).delete_button.isEnabled()
    # the session refuses too (another client, or a click that slipped through)
    first = tab.view.messages()[0].data.id
    future = window.session.remove_message(tab.cid, first)
    qtbot.waitUntil(future.done, timeout=5000)
    assert "stop it first" in str(future.exception())
    tab.stop()
    wait_idle(qtbot, tab)
    assert widget_of(tab, "an earlier message").delete_button.isEnabled()
    assert window.db.get_message(first).content == "an earlier message"
