"""The message list of one tab: one small widget per message in a scroll area.

Only the message being streamed is re-rendered while text arrives; the view follows the
end unless the user scrolled up. Message actions are emitted as ``action(name, message_id)``
with name in copy, edit, regenerate, fork, prev, next.
"""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtCore import QEvent, QObject, Qt, QUrl, Signal, Slot
from PySide6.QtGui import QDesktopServices, QGuiApplication, QPalette
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QScrollArea,
    QSizePolicy,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.ui import markdown

ROLE_NAMES = {"user": "You", "assistant": "Assistant", "system": "System", "tool": "Tool"}


@dataclass
class MessageData:
    """What one message widget shows (built from a storage Message)."""

    id: int
    role: str
    content: str
    status: str = "complete"
    token_count: int | None = None
    prompt_tokens: int | None = None
    tokens_per_second: float | None = None
    sibling_index: int = 1
    sibling_count: int = 1
    error: str | None = None
    cached_tokens: int | None = None


def is_dark(widget: QWidget | None = None) -> bool:
    """Dark mode: the system colour scheme, or the palette when the platform does not say."""
    hints = QGuiApplication.styleHints()
    scheme = hints.colorScheme() if hints is not None else Qt.ColorScheme.Unknown
    if scheme == Qt.ColorScheme.Dark:
        return True
    if scheme == Qt.ColorScheme.Light:
        return False
    palette = widget.palette() if widget is not None else QGuiApplication.palette()
    return palette.color(QPalette.ColorRole.Window).lightness() < 128


def figures_text(data: MessageData) -> str:
    parts: list[str] = []
    if data.token_count:
        parts.append(f"{data.token_count} tokens")
    if data.tokens_per_second:
        parts.append(f"{data.tokens_per_second:.1f} tok/s")
    if data.prompt_tokens:
        prompt = f"prompt {data.prompt_tokens} tokens"
        if data.cached_tokens is not None:
            prompt += f" ({data.cached_tokens} cached)"
        parts.append(prompt)
    if data.status == "stopped":
        parts.append("stopped")
    elif data.status == "partial":
        parts.append("interrupted")
    elif data.status == "error":
        parts.append("error")
    return " · ".join(parts)


class MessageWidget(QFrame):
    """One message: role, actions, content (Markdown for replies), figures."""

    action = Signal(str, int)

    def __init__(self, data: MessageData, dark: bool, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.data = data
        self._dark = dark
        self._code_blocks: list[str] = []
        self._streaming = False
        self.setObjectName("message-" + data.role)
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setAutoFillBackground(True)
        self.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Maximum)
        self._apply_background()

        layout = QVBoxLayout(self)
        layout.setContentsMargins(12, 8, 12, 8)
        layout.setSpacing(4)
        header = QHBoxLayout()
        header.setSpacing(2)
        self.role_label = QLabel(f"<b>{ROLE_NAMES.get(data.role, data.role)}</b>")
        header.addWidget(self.role_label)
        header.addStretch(1)
        self.prev_button = self._button("‹", "prev", "Previous version")
        self.sibling_label = QLabel()
        self.next_button = self._button("›", "next", "Next version")
        for w in (self.prev_button, self.sibling_label, self.next_button):
            header.addWidget(w)
        self.copy_button = self._button("Copy", "copy", "Copy this message")
        header.addWidget(self.copy_button)
        if data.role == "user":
            self.edit_button = self._button("Edit", "edit", "Edit and resend this message")
            header.addWidget(self.edit_button)
        if data.role == "assistant":
            self.regen_button = self._button("Regenerate", "regenerate", "Write this reply again")
            header.addWidget(self.regen_button)
        self.fork_button = self._button("Fork", "fork", "Open a new tab from here")
        header.addWidget(self.fork_button)
        layout.addLayout(header)

        self.content = QLabel()
        self.content.setObjectName("content")
        self.content.setWordWrap(True)
        self.content.setTextFormat(Qt.TextFormat.RichText)
        self.content.setOpenExternalLinks(False)
        self.content.setTextInteractionFlags(
            Qt.TextInteractionFlag.TextBrowserInteraction
            | Qt.TextInteractionFlag.TextSelectableByKeyboard
        )
        self.content.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Minimum)
        self.content.linkActivated.connect(self._on_link)
        layout.addWidget(self.content)

        self.figures = QLabel()
        self.figures.setObjectName("figures")
        font = self.figures.font()
        font.setPointSizeF(max(6.0, font.pointSizeF() * 0.85))
        self.figures.setFont(font)
        self.figures.setEnabled(False)  # the palette's muted text colour
        layout.addWidget(self.figures)
        self.refresh()

    def _button(self, text: str, name: str, tip: str) -> QToolButton:
        button = QToolButton(self)
        button.setText(text)
        button.setToolTip(tip)
        button.setAutoRaise(True)
        button.setObjectName(name)
        button.clicked.connect(lambda: self.action.emit(name, self.data.id))
        return button

    def _apply_background(self) -> None:
        palette = self.palette()
        base = palette.color(QPalette.ColorRole.Base)
        if self.data.role == "user":
            color = base.darker(106) if not self._dark else base.lighter(140)
        else:
            color = base
        palette.setColor(QPalette.ColorRole.Window, color)
        self.setPalette(palette)

    def set_dark(self, dark: bool) -> None:
        if dark != self._dark:
            self._dark = dark
            self._apply_background()
            self.refresh()

    def set_streaming(self, streaming: bool) -> None:
        self._streaming = streaming
        self.set_actions_enabled(not streaming)

    def set_actions_enabled(self, enabled: bool) -> None:
        for button in self.findChildren(QToolButton):
            if button.objectName() != "copy":
                button.setEnabled(enabled)
        if enabled:
            self._update_siblings()

    def set_content(self, text: str) -> None:
        self.data.content = text
        self._render()

    def update_data(self, data: MessageData) -> None:
        self.data = data
        self.refresh()

    def refresh(self) -> None:
        self._render()
        self.figures.setText(figures_text(self.data))
        self.figures.setVisible(bool(self.figures.text()))
        self._update_siblings()

    def _update_siblings(self) -> None:
        n = self.data.sibling_count
        visible = n > 1
        self.sibling_label.setText(f"{self.data.sibling_index}/{n}")
        for w in (self.prev_button, self.sibling_label, self.next_button):
            w.setVisible(visible)
        if visible and not self._streaming:
            self.prev_button.setEnabled(self.data.sibling_index > 1)
            self.next_button.setEnabled(self.data.sibling_index < n)

    def _render(self) -> None:
        data = self.data
        if data.role == "assistant":
            text = data.content
            if not text and self._streaming:
                html = "<p><i>…</i></p>"
                self._code_blocks = []
            else:
                rendered = markdown.render(text, markdown.Theme(self._dark))
                html, self._code_blocks = rendered.html, rendered.code_blocks
        else:
            html = markdown.render_plain(data.content)
            self._code_blocks = []
        if data.error:
            html += f'<p style="color:#d33;">{markdown.render_plain(data.error)}</p>'
        self.content.setText(html)

    @Slot(str)
    def _on_link(self, href: str) -> None:
        if href.startswith(markdown.COPY_CODE_PREFIX):
            try:
                index = int(href[len(markdown.COPY_CODE_PREFIX) :])
                code = self._code_blocks[index]
            except (ValueError, IndexError):
                return
            clipboard = QGuiApplication.clipboard()
            if clipboard is not None:
                clipboard.setText(code)
            return
        if href.lower().startswith(("http://", "https://", "mailto:")):
            QDesktopServices.openUrl(QUrl(href))

    def code_blocks(self) -> list[str]:
        return list(self._code_blocks)


class ChatView(QScrollArea):
    """The messages of the branch shown; see the module docstring."""

    action = Signal(str, int)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWidgetResizable(True)
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self._body = QWidget()
        self._body.setObjectName("chat-body")
        self._layout = QVBoxLayout(self._body)
        self._layout.setContentsMargins(0, 0, 0, 0)
        self._layout.setSpacing(1)
        self._layout.addStretch(1)
        self.setWidget(self._body)
        self._widgets: list[MessageWidget] = []
        self._dark = is_dark(self)
        self.follow = True
        self._placeholder = QLabel()
        self._placeholder.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self._placeholder.setWordWrap(True)
        self._placeholder.setEnabled(False)
        self._layout.insertWidget(0, self._placeholder)
        bar = self.verticalScrollBar()
        bar.valueChanged.connect(self._on_scrolled)
        bar.rangeChanged.connect(self._on_range)
        self._body.installEventFilter(self)

    # -- content

    def set_placeholder(self, text: str) -> None:
        self._placeholder.setText(text)
        self._placeholder.setVisible(bool(text) and not self._widgets)

    def messages(self) -> list[MessageWidget]:
        return list(self._widgets)

    def clear(self) -> None:
        for w in self._widgets:
            w.setParent(None)
            w.deleteLater()
        self._widgets = []
        self._placeholder.setVisible(bool(self._placeholder.text()))

    def set_messages(self, messages: list[MessageData]) -> None:
        self.setUpdatesEnabled(False)
        try:
            self.clear()
            for data in messages:
                self._add(data)
        finally:
            self.setUpdatesEnabled(True)
        self.follow = True
        self.scroll_to_end()

    def append(self, data: MessageData) -> MessageWidget:
        widget = self._add(data)
        self.follow = True
        self.scroll_to_end()
        return widget

    def _add(self, data: MessageData) -> MessageWidget:
        widget = MessageWidget(data, self._dark, self._body)
        widget.action.connect(self.action)
        self._layout.insertWidget(self._layout.count() - 1, widget)
        self._widgets.append(widget)
        self._placeholder.setVisible(False)
        return widget

    def last(self) -> MessageWidget | None:
        return self._widgets[-1] if self._widgets else None

    def widget_for(self, message_id: int) -> MessageWidget | None:
        return next((w for w in self._widgets if w.data.id == message_id), None)

    def set_actions_enabled(self, enabled: bool) -> None:
        for w in self._widgets:
            if not w._streaming:
                w.set_actions_enabled(enabled)

    # -- following the end

    def scroll_to_end(self) -> None:
        bar = self.verticalScrollBar()
        bar.setValue(bar.maximum())

    @Slot(int)
    def _on_scrolled(self, value: int) -> None:
        bar = self.verticalScrollBar()
        self.follow = value >= bar.maximum() - 8

    @Slot(int, int)
    def _on_range(self, _low: int, high: int) -> None:
        if self.follow:
            self.verticalScrollBar().setValue(high)

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if watched is self._body and event.type() == QEvent.Type.PaletteChange:
            dark = is_dark(self)
            if dark != self._dark:
                self._dark = dark
                for w in self._widgets:
                    w.set_dark(dark)
        return super().eventFilter(watched, event)
