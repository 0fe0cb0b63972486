"""Text completion for base models (issue 28, item 6): a base model's chat is one document
(the composer's text added, the continuation appended in place, no template, no bubbles),
chosen by default for a model file without a chat template and by "Raw" in the template
picker for any model. Real window, real tiny models on llama.cpp."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import Qt

from app.messages import document
from app.ui.template_picker import TemplatePicker
from app.ui.text_completion import CONTINUE_TEXT, PLACEHOLDER, RAW_TEMPLATE, RAW_TEXT
from tests.support.gguf_models import TinySpec, write_tiny_model
from tests.ui.conftest import WORDS_GRAMMAR, send, set_sampling, wait_idle


@pytest.fixture(scope="module")
def base_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    spec = TinySpec(name="Tiny Base", chat_template=None)
    return write_tiny_model(tmp_path_factory.mktemp("base") / "base.gguf", spec)


def words(tab: Any, max_tokens: int = 4) -> None:
    set_sampling(tab, grammar=WORDS_GRAMMAR, max_tokens=max_tokens, seed=1)


def test_a_base_model_continues_the_document_in_place(
    qtbot: Any, make_window: Any, base_model: Path
) -> None:
    window, _ = make_window(model=base_model)
    tab = window.new_tab()
    assert tab.document_mode  # the file has no chat template: text completion
    assert tab.send_button.text() == CONTINUE_TEXT
    # the window applies the Enter preference after making the tab: the mode's text stays
    assert tab.composer.placeholderText() == PLACEHOLDER
    words(tab)
    opening = "Once upon a time"
    send(qtbot, tab, opening)
    first = wait_idle(qtbot, tab)
    user, reply = tab.branch
    assert (user.role, user.content) == ("user", opening)
    assert reply.content  # the tiny model wrote words
    # one widget: the document, the continuation right after the text (no bubbles)
    (shown,) = tab.view.messages()
    assert shown.data.role == "document"
    assert shown.data.content == opening + reply.content
    assert not shown.avatar.isVisible() and not shown.role_label.isVisible()

    # Enter with the box empty: the model writes on from the document's end
    qtbot.keyClick(tab.composer, Qt.Key.Key_Return)
    second = wait_idle(qtbot, tab)
    assert len(tab.branch) == 3 and tab.branch[2].parent_id == reply.id
    (shown,) = tab.view.messages()
    assert shown.data.content == document(tab.branch)
    # the prompt was the whole document as it stands, most of it still in the cache
    assert second.n_prompt > first.n_prompt
    assert second.cached_tokens >= first.n_prompt

    # Try again on the document writes its last part again (a second version)
    tab.regenerate(shown.data.id)
    wait_idle(qtbot, tab)
    assert tab.branch[2].parent_id == reply.id
    (shown,) = tab.view.messages()
    assert shown.data.sibling_count == 2


def test_raw_in_the_picker_makes_a_chat_model_complete_text(qtbot: Any, make_window: Any) -> None:
    picker = TemplatePicker()
    qtbot.addWidget(picker)
    raw = picker.combo.findData(RAW_TEMPLATE)
    assert raw >= 0 and picker.combo.itemText(raw) == RAW_TEXT

    window, _ = make_window()  # the tiny model has a chat template: a chat
    tab = window.new_tab()
    assert not tab.document_mode
    words(tab)
    send(qtbot, tab, "hello world")
    chat = wait_idle(qtbot, tab)
    assert [w.data.role for w in tab.view.messages()] == ["user", "assistant"]

    window.settings_ui.choose_chat_template(RAW_TEMPLATE)
    qtbot.waitUntil(lambda: tab.document_mode, timeout=10000)
    assert [w.data.role for w in tab.view.messages()] == ["document"]

    other = window.new_tab()
    assert other.document_mode
    words(other)
    send(qtbot, other, "hello world")
    raw_result = wait_idle(qtbot, other)
    # the same text without the template's role markers: fewer prompt tokens
    assert raw_result.n_prompt < chat.n_prompt

    window.settings_ui.choose_chat_template("")  # automatic: a chat again
    qtbot.waitUntil(lambda: not tab.document_mode, timeout=10000)
    assert [w.data.role for w in tab.view.messages()] == ["user", "assistant"]


def test_an_empty_document_asks_for_a_start(qtbot: Any, make_window: Any, base_model: Path) -> None:
    window, _ = make_window(model=base_model)
    tab = window.new_tab()
    qtbot.keyClick(tab.composer, Qt.Key.Key_Return)  # nothing to continue yet
    assert not tab.generating and tab.branch == []
    assert tab.notice.isVisible() and "Write the start of the text" in tab.notice.text()
