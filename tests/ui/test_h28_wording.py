"""What a new user read (issue 28, item 6): help texts without raw backticks, sentences
right for one resident tab, no "batched step" for a context of one sequence, an unused new
chat that says it is not kept, the model file's own template named with its family and
viewable, focus back in the message box after Send (Esc still stops), readable detail
lines and intro, one arrow on the picker, no "No models yet" under a loaded model. The
real window on the tiny model, offscreen."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QPalette
from PySide6.QtWidgets import QLabel, QPlainTextEdit, QWidget

from app.engine import ContextSettings
from app.engine.chat_template import TemplateChoice, TemplateSource
from app.ui.settings_texts import estimate_text
from app.ui.sidebar_model import UNUSED_TEXT
from app.ui.tab_intro import sharing_tip, template_label
from app.ui.template_picker import TemplatePicker, in_use_text
from app.ui.theme import apply_theme
from tests.ui.conftest import ENDLESS_GRAMMAR, WORDS_GRAMMAR, send, set_sampling, settle, wait_idle

CHATML = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n"
    "{% endfor %}<|im_start|>assistant\n"
)


@pytest.fixture(autouse=True)
def back_to_the_system_theme() -> Iterator[None]:
    yield
    apply_theme("system")


def luminance(color: QColor) -> float:
    def channel(c: float) -> float:
        return c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4

    return (
        0.2126 * channel(color.redF())
        + 0.7152 * channel(color.greenF())
        + 0.0722 * channel(color.blueF())
    )


def contrast(a: QColor, b: QColor) -> float:
    la, lb = sorted((luminance(a), luminance(b)), reverse=True)
    return (la + 0.05) / (lb + 0.05)


def shown_color(widget: QWidget) -> QColor:
    group = QPalette.ColorGroup.Active if widget.isEnabled() else QPalette.ColorGroup.Disabled
    return widget.palette().color(group, QPalette.ColorRole.WindowText)


def test_no_raw_backticks_in_the_settings(qtbot: Any, make_window: Any) -> None:
    window, _ = make_window()
    window.open_settings()
    panel = window.settings_panel()
    assert panel is not None
    texts = [w.text() for w in panel.findChildren(QLabel)]
    texts += [w.toolTip() for w in panel.findChildren(QWidget)]
    assert any("rpc-worker" in t for t in texts)  # the remote workers' help is there
    assert not [t for t in texts if "`" in t]


def test_one_resident_tab_and_one_sequence_are_said_right(make_window: Any) -> None:
    window, _ = make_window()
    model = window.model
    one = dataclasses.replace(ContextSettings(), n_seq_max=1, kv_unified=True)
    text = estimate_text(one, model.info)
    assert "All 1 resident tab" not in text and "one resident tab" in text
    assert "All 3 resident tabs share" in estimate_text(
        dataclasses.replace(one, n_seq_max=3), model.info
    )
    single = dataclasses.replace(model, settings=dataclasses.replace(model.settings, n_seq_max=1))
    tip = sharing_tip(single)
    assert "batched" not in tip and "take turns" in tip


def test_an_unused_new_chat_says_it_is_not_kept(qtbot: Any, make_window: Any) -> None:
    window, _ = make_window()
    tab = window.new_tab()
    window.sidebar.refresh()
    rows = [r for r in window.sidebar.model.rows if r.conversation_id == tab.cid]
    assert rows and UNUSED_TEXT in rows[0].subtitle and "0 messages" not in rows[0].subtitle


def test_the_model_files_template_is_named_with_its_family_and_can_be_viewed(
    qtbot: Any,
) -> None:
    own = TemplateChoice("gguf", TemplateSource.GGUF, "The model file's own.", CHATML)
    assert template_label(own) == "gguf, chatml style"
    assert in_use_text(own).startswith("In use: gguf, chatml style (the model file's own)")
    picker = TemplatePicker()
    qtbot.addWidget(picker)
    picker.set_model(own, "")
    assert picker.view_button.isEnabled()
    dialog = picker.view_template()
    assert dialog is not None
    text = dialog.findChild(QPlainTextEdit, "chat-template-text")
    assert text is not None and text.toPlainText() == CHATML and text.isReadOnly()
    dialog.close()


def test_after_send_typing_goes_to_the_message_box_and_esc_stops(
    qtbot: Any, make_window: Any
) -> None:
    window, _ = make_window()
    tab = window.new_tab()
    set_sampling(tab, grammar=ENDLESS_GRAMMAR, max_tokens=2000)
    window.activateWindow()
    tab.composer.setPlainText("write on")
    tab.send_button.setFocus()
    qtbot.mouseClick(tab.send_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: tab.generating, timeout=5000)
    assert tab.composer.hasFocus() and not tab.stop_button.hasFocus()
    qtbot.keyClick(tab.composer, Qt.Key.Key_Escape)
    result = wait_idle(qtbot, tab)
    assert result.finish_reason.value == "aborted"


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_detail_lines_and_the_intro_read_well(qtbot: Any, make_window: Any, theme: str) -> None:
    window, _ = make_window(theme=theme)
    tab = window.new_tab()
    intro = tab.view._placeholder
    base = tab.view.palette().color(QPalette.ColorRole.Base)
    assert contrast(shown_color(intro), base) >= 4.5
    set_sampling(tab, grammar=WORDS_GRAMMAR, max_tokens=3)
    send(qtbot, tab, "hello")
    wait_idle(qtbot, tab)
    settle()
    figures = tab.view.last().figures
    assert figures.text()
    assert contrast(shown_color(figures), base) >= 4.5


def test_one_arrow_on_the_picker_and_no_models_yet_under_a_loaded_model(
    qtbot: Any, make_window: Any
) -> None:
    window, _ = make_window()
    picker = window.models_ui.model_picker
    assert "▾" not in picker.text() and picker.text().startswith("Model:")
    window.show_model_manager()
    manager = window.model_manager()
    assert manager is not None
    qtbot.waitUntil(lambda: "Loaded now" in manager._empty_label.text(), timeout=10000)
    assert "No models yet" not in manager._empty_label.text()
