"""The chat view on its own (no engine): heights, the reading column, the look of the
messages in both themes, the hover actions, Markdown, editing in place, the context divider
and the streaming of a long paragraph. Real widgets on Qt's offscreen platform."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from PySide6.QtCore import QEvent, QPointF, Qt
from PySide6.QtGui import (
    QColor,
    QEnterEvent,
    QFocusEvent,
    QFontDatabase,
    QFontInfo,
    QImage,
    QPalette,
    QTextCharFormat,
    QTextDocument,
)
from PySide6.QtWidgets import QApplication, QLabel, QWidget

from app.ui import markdown
from app.ui.chat_view import (
    CHUNK_CHARS,
    COLUMN_MARGIN,
    COLUMN_MAX_WIDTH,
    CONTEXT_START_TEXT,
    ChatView,
    MessageData,
    MessageWidget,
    figures_text,
)
from app.ui.theme import chat_colors
from tests.ui.conftest import settle

LONG = "\n\n".join(f"Paragraph {i}: " + "lorem ipsum dolor sit amet " * 30 for i in range(6))


def conversation() -> list[MessageData]:
    """Eight messages, three of them long (the case that showed a page of blank)."""
    return [
        MessageData(
            i + 1, "user" if i % 2 == 0 else "assistant", LONG if i in (1, 3, 5) else f"m{i}"
        )
        for i in range(8)
    ]


def assert_body_fits(view: ChatView) -> None:
    """The body is exactly its messages (no blank), and the end is in view."""
    body = view.widget()
    assert body is not None
    layout = body.layout()
    assert layout is not None
    widgets = view.messages()
    margins = layout.contentsMargins()
    expected = (
        sum(w.height() for w in widgets)
        + layout.spacing() * (len(widgets) - 1)
        + margins.top()
        + margins.bottom()
    )
    assert expected > view.viewport().height()  # long enough to scroll
    assert body.height() == expected
    for w in widgets:  # each message is as tall as its text needs at its width
        assert w.height() == w.heightForWidth(w.width())
    view.scroll_to_end()
    settle()
    last = widgets[-1]
    top = last.mapTo(view.viewport(), last.rect().topLeft()).y()
    assert top >= 0, (
        top,
        last.height(),
        view.viewport().height(),
        view.verticalScrollBar().maximum(),
        body.height(),
    )
    assert top + last.height() + margins.bottom() == view.viewport().height()


def test_body_height_is_its_messages_after_load_resize_and_switch(view: ChatView) -> None:
    view.set_messages(conversation())
    settle()
    assert_body_fits(view)
    view.resize(600, 480)
    settle()
    assert_body_fits(view)
    view.resize(1300, 700)
    settle()
    assert_body_fits(view)
    view.hide()  # a tab switch: hidden, then shown again
    settle()
    view.show()
    settle()
    assert_body_fits(view)
    view.set_messages(conversation()[:7])  # a restored chat replacing another
    settle()
    assert_body_fits(view)


def test_messages_stand_in_a_centred_column(view: ChatView) -> None:
    view.set_messages(conversation())
    view.resize(1400, 600)
    settle()
    port = view.viewport().width()
    for w in view.messages():
        assert w.width() == COLUMN_MAX_WIDTH
        left = w.mapTo(view.viewport(), w.rect().topLeft()).x()
        assert abs(left - (port - w.width() - left)) <= 1  # centred
    view.resize(500, 600)  # narrower than the column: full width
    settle()
    port = view.viewport().width()
    assert all(w.width() == port - 2 * COLUMN_MARGIN for w in view.messages())


def pixel(widget: QWidget, x: int, y: int) -> QColor:
    image: QImage = widget.grab().toImage()
    ratio = image.devicePixelRatio()
    return image.pixelColor(int(x * ratio), int(y * ratio))


def lightness_gap(a: QColor, b: QColor) -> int:
    return abs(a.lightness() - b.lightness())


@pytest.mark.parametrize("dark", [False, True])
def test_user_bubble_and_assistant_card_told_apart(qtbot: Any, dark: bool) -> None:
    colors = chat_colors(dark)
    base = QColor("#1e1e1e" if dark else "#ffffff")
    shown = []
    for data in (MessageData(1, "user", "hello"), MessageData(2, "assistant", "hi there")):
        widget = MessageWidget(data, dark)
        qtbot.addWidget(widget)
        widget.set_dark(dark, base)
        widget.resize(600, widget.heightForWidth(600))
        widget.show()
        settle()
        card = widget.card
        # a point inside the card, away from the text and the icons
        at = card.mapTo(widget, card.rect().bottomLeft()) + QPointF(30, -3).toPoint()
        shown.append(pixel(widget, at.x(), at.y()))
    user, assistant = shown
    assert user.name() == colors.user_bubble
    assert assistant.name() == base.name()
    assert lightness_gap(user, assistant) >= 10  # visible at a glance
    text = QColor("#e6e6e6" if dark else "#000000")  # the themes' text colours
    assert lightness_gap(text, user) > 120  # and the text on the bubble reads well


def icon_drawn(button: Any) -> bool:
    image = button.icon().pixmap(16, 16).toImage()
    return any(
        image.pixelColor(x, y).alpha() > 0
        for x in range(image.width())
        for y in range(image.height())
    )


def test_actions_are_icons_shown_on_hover_and_keyboard_focus(qtbot: Any) -> None:
    widget = MessageWidget(MessageData(7, "assistant", "text"), dark=False)
    qtbot.addWidget(widget)
    widget.show()
    buttons = [widget.copy_button, widget.regen_button, widget.fork_button]
    assert [b.objectName() for b in buttons] == ["copy", "regenerate", "fork"]
    assert [b.accessibleName() for b in buttons] == ["Copy", "Regenerate", "Fork"]
    assert all(b.toolTip() and b.width() == b.height() for b in buttons)
    assert not any(icon_drawn(b) for b in buttons)  # hidden while nothing points at it
    point = QPointF(5, 5)
    QApplication.sendEvent(widget, QEnterEvent(point, point, point))
    assert widget.revealed() and all(icon_drawn(b) for b in buttons)
    QApplication.sendEvent(widget, QEvent(QEvent.Type.Leave))
    assert not any(icon_drawn(b) for b in buttons)
    # the keyboard reaches them too (they stay in the Tab order while hidden)
    assert widget.fork_button.focusPolicy() & Qt.FocusPolicy.TabFocus
    QApplication.sendEvent(widget.fork_button, QFocusEvent(QEvent.Type.FocusIn))
    assert all(icon_drawn(b) for b in buttons)
    QApplication.sendEvent(widget.fork_button, QFocusEvent(QEvent.Type.FocusOut))
    assert not any(icon_drawn(b) for b in buttons)


def test_copy_says_copied_for_a_moment(qtbot: Any) -> None:
    widget = MessageWidget(MessageData(3, "user", "some text"), dark=False)
    qtbot.addWidget(widget)
    widget.show()
    with qtbot.waitSignal(widget.action) as signal:
        qtbot.mouseClick(widget.copy_button, Qt.MouseButton.LeftButton)
    assert signal.args == ["copy", 3]
    assert widget.copied_feedback() and widget.copied_label.isVisibleTo(widget)
    assert widget.copy_button.toolTip() == "Copied"
    qtbot.waitUntil(lambda: not widget.copied_feedback(), timeout=3000)
    assert not widget.copied_label.isVisibleTo(widget)
    assert widget.copy_button.toolTip() == "Copy this message"


def test_figures_say_how_the_reply_ended_and_the_first_token_time() -> None:
    done = MessageData(1, "assistant", "x", token_count=12, finish="length", ttft_ms=240.0)
    assert figures_text(done) == "12 tokens · first token 240 ms · max tokens reached"
    assert "first token" not in figures_text(done, streaming=True)
    stopped = MessageData(2, "assistant", "x", status="stopped", finish="aborted", ttft_ms=1500)
    assert figures_text(stopped) == "first token 1.5 s · stopped"
    assert figures_text(MessageData(3, "assistant", "x", finish="eog")) == "end of reply"
    assert figures_text(MessageData(4, "assistant", "x")) == ""


def document(html: str) -> QTextDocument:
    doc = QTextDocument()
    doc.setHtml(html)
    return doc


def fragments(doc: QTextDocument) -> Iterator[Any]:
    block = doc.begin()
    while block.isValid():
        it = block.begin()
        while not it.atEnd():
            yield it.fragment()
            it += 1
        block = block.next()


def is_mono(fmt: QTextCharFormat) -> bool:
    """Whether text of this format is drawn with the system's monospace font."""
    fixed = QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont)
    return QFontInfo(fmt.font()).family() == QFontInfo(fixed).family()


def test_markdown_tables_quotes_inline_code_and_bare_urls() -> None:
    colors = chat_colors(False)
    text = (
        "| a | b |\n|---|---|\n| 1 | 2 |\n\n> quoted\n\nrun `ls -l` at https://example.com/x, "
        "not javascript:alert(1) nor [this](javascript:alert(1))"
    )
    doc = document(markdown.render(text).html)
    tables = [f for f in doc.rootFrame().childFrames() if f.frameFormat().isTableFormat()]
    assert len(tables) == 2  # the table, and the quote's bar
    table_format = tables[0].frameFormat().toTableFormat()
    assert table_format.border() >= 1 and table_format.cellPadding() >= 4
    bar = tables[1].cellAt(0, 0).format().background().color()  # type: ignore[attr-defined]
    assert bar.name() == colors.quote_bar
    code = [f for f in fragments(doc) if "ls -l" in f.text()]
    assert code and code[0].charFormat().background().color().name() == colors.inline_code_bg
    assert is_mono(code[0].charFormat())
    links = {f.charFormat().anchorHref() for f in fragments(doc) if f.charFormat().isAnchor()}
    assert links == {"https://example.com/x"}  # the comma stays out; no javascript: link


def test_user_messages_show_code_in_monospace_and_the_rest_as_typed(view: ChatView) -> None:
    typed = "*not emphasis* and `x < y`\n```python\nprint('hi')\n```\n# not a heading"
    view.set_messages([MessageData(1, "user", typed)])
    widget = view.messages()[0]
    doc = document(widget.content.text())
    plain = doc.toPlainText()
    assert "*not emphasis*" in plain and "# not a heading" in plain and "x < y" in plain
    mono = [f.text() for f in fragments(doc) if is_mono(f.charFormat())]
    assert any("x < y" in t for t in mono) and any("print" in t for t in mono)
    assert not any("emphasis" in t or "heading" in t for t in mono)
    assert widget.code_blocks() == ["print('hi')"]
    widget.content.linkActivated.emit(markdown.COPY_CODE_PREFIX + "0")
    clipboard = QApplication.clipboard()
    assert clipboard is not None and clipboard.text() == "print('hi')"


def test_the_message_being_edited_is_highlighted_where_it_stands(view: ChatView) -> None:
    messages = conversation()
    view.set_messages(messages)
    view.set_editing(3)
    editing = view.widget_for(3)
    assert editing is not None and editing.editing
    assert editing.editing_tag.isVisibleTo(editing) and editing.editing_tag.text() == "Editing"
    border = editing.card.border
    assert border is not None and border.name() == chat_colors(view._dark).editing_border
    assert [w.editing for w in view.messages()].count(True) == 1
    view.set_messages(messages)  # rebuilt (a reload): still highlighted
    rebuilt = view.widget_for(3)
    assert rebuilt is not None and rebuilt.editing
    view.set_editing(None)  # sent or cancelled
    assert not rebuilt.editing and not rebuilt.editing_tag.isVisibleTo(rebuilt)
    assert rebuilt.card.border is not None  # back to the user's bubble
    assert rebuilt.card.border.name() == chat_colors(view._dark).user_border


def test_divider_where_the_model_stops_seeing_history(view: ChatView) -> None:
    messages = conversation()
    view.set_messages(messages)
    divider = view.divider()
    assert not divider.isVisibleTo(view)
    view.set_context_start(5)
    settle()
    assert divider.isVisibleTo(view) and divider.text() == CONTEXT_START_TEXT
    fourth, fifth = view.widget_for(4), view.widget_for(5)
    assert fourth is not None and fifth is not None
    assert fourth.geometry().bottom() < divider.geometry().top()
    assert divider.geometry().bottom() < fifth.geometry().top()
    view.set_messages(messages)  # a reload keeps it before the same message
    settle()
    fifth = view.widget_for(5)
    assert fifth is not None and divider.geometry().bottom() < fifth.geometry().top()
    view.keep_first(4)  # its message gone: no divider
    assert not divider.isVisibleTo(view)
    view.append(messages[4])  # back
    assert divider.isVisibleTo(view)
    view.set_context_start(None)
    assert not divider.isVisibleTo(view)
    assert_body_fits_with_divider(view, False)


def assert_body_fits_with_divider(view: ChatView, shown: bool) -> None:
    settle()
    assert view.divider().isVisibleTo(view) is shown
    assert view.findChildren(QLabel, "context-start") == [view.divider()]


def test_a_long_streamed_paragraph_is_laid_out_in_short_pieces(view: ChatView) -> None:
    view.set_messages([MessageData(1, "user", "tell me")])
    reply = view.append(MessageData(2, "assistant", ""))
    reply.set_streaming(True)
    settle()
    words = " ".join(f"word{i}" for i in range(900))  # one paragraph, no line break
    for end in range(200, len(words) + 200, 150):
        reply.set_content(words[:end])
        settle()
        # what changes while it streams stays short, whatever the paragraph's length
        assert len(reply.data.content) - reply._frozen <= 2 * CHUNK_CHARS + 150
    assert len(reply.labels()) >= 4
    # the pieces show the whole paragraph, each word once, in order
    shown = " ".join(document(label.text()).toPlainText() for label in reply.labels())
    assert shown.split() == words.split()
    reply.set_streaming(False)  # done: one paragraph again
    assert len(reply.labels()) == 1
    assert document(reply.content.text()).toPlainText().split() == words.split()
    settle()
    assert reply.height() == reply.heightForWidth(reply.width())


def test_theme_change_recolours_the_messages(view: ChatView) -> None:
    view.set_messages(conversation()[:2])
    user = view.messages()[0]
    light_fill = user.card.fill
    user.set_dark(True, QColor("#1e1e1e"))
    assert user.card.fill is not None and light_fill is not None
    assert user.card.fill.name() == chat_colors(True).user_bubble != light_fill.name()
    assert user.palette().color(QPalette.ColorRole.Window).name() == "#1e1e1e"
