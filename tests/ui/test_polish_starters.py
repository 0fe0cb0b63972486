"""Starters on a new chat (issue 20, item 6): the empty chat offers a few prompts to click;
one fills the composer and sends nothing; they are reachable with the keyboard; a base
model says it continues text and offers a "continue this text" starter; they go once the
chat has messages. Real window, real engine."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication

from app.ui.tab_intro import BASE_STARTERS, BASE_TEXT, CHAT_STARTERS
from tests.engine.test_template_choice import write_gemma_vocab_model
from tests.ui.conftest import WORDS_GRAMMAR, send, wait_idle


@pytest.fixture(scope="module")
def base_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_gemma_vocab_model(tmp_path_factory.mktemp("base") / "base-no-template.gguf")


def test_a_starter_fills_the_composer_and_sends_nothing(qtbot: Any, make_window: Any) -> None:
    window, _ = make_window()
    window.activateWindow()
    tab = window.new_tab()
    assert tab is not None
    starters = tab.starters
    qtbot.waitUntil(starters.isVisible, timeout=3000)
    assert [b.text() for b in starters.buttons] == [label for label, _ in CHAT_STARTERS]
    qtbot.mouseClick(starters.buttons[0], Qt.MouseButton.LeftButton)
    assert tab.composer.toPlainText() == CHAT_STARTERS[0][1]
    assert tab.composer.hasFocus() or window.focusWidget() is tab.composer
    assert tab.composer.textCursor().atEnd()  # the user goes on typing
    assert not tab.generating and tab.host.db.get_thread(tab.cid) == []  # nothing was sent
    # the keyboard: Tab goes on from the message box to the starters, Space presses one
    qtbot.waitUntil(lambda: QApplication.activeWindow() is window, timeout=5000)
    focused: list[Any] = []
    tab.composer.setFocus()
    for _ in range(6):
        qtbot.keyClick(QApplication.focusWidget(), Qt.Key.Key_Tab)
        focused.append(QApplication.focusWidget())
        if focused[-1] in starters.buttons:
            break
    assert focused[-1] is starters.buttons[0], focused
    qtbot.keyClick(starters.buttons[0], Qt.Key.Key_Tab)
    second = QApplication.focusWidget()
    assert second is starters.buttons[1]
    qtbot.keyClick(second, Qt.Key.Key_Space)
    assert tab.composer.toPlainText() == CHAT_STARTERS[1][1]
    # once the chat has messages, they go
    sampling = {**tab.conversation.sampling, "grammar": WORDS_GRAMMAR, "max_tokens": 3}
    tab.host.db.update_conversation_settings(tab.cid, sampling=sampling)
    tab.conversation = tab.host.db.get_conversation(tab.cid)
    send(qtbot, tab, "hello")
    wait_idle(qtbot, tab)
    assert not starters.isVisible()


def test_a_base_model_offers_to_continue_a_text(
    qtbot: Any, make_window: Any, base_model: Path
) -> None:
    window, _ = make_window(model=base_model)
    tab = window.new_tab()
    assert tab is not None
    assert BASE_TEXT in tab.view._placeholder.text()
    qtbot.waitUntil(tab.starters.isVisible, timeout=3000)
    (button,) = tab.starters.buttons
    assert button.text() == BASE_STARTERS[0][0] == "Continue this text"
    qtbot.mouseClick(button, Qt.MouseButton.LeftButton)
    assert tab.composer.toPlainText() == BASE_STARTERS[0][1]
