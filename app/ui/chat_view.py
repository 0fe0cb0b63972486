"""The message list of one tab: one small widget per message in a scroll area.

Only the message being streamed is re-rendered while text arrives; the view follows the
end unless the user scrolled up. Message actions are emitted as ``action(name, message_id)``
with name in copy, edit, regenerate, fork, prev, next.

A reasoning model's thinking shows in a :class:`ReasoningBlock` above the answer: expanded
with "Thinking…" while it streams, collapsed ("Thought for 12 s") once the answer starts;
a click on its header opens it again. It is plain text (the model's text is untrusted).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from PySide6.QtCore import QEvent, Qt, QUrl, Signal, Slot
from PySide6.QtGui import QColor, QDesktopServices, QGuiApplication, QPalette
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
from app.ui.theme import DARK_COLORS, LIGHT_COLORS, is_dark

CHUNK_CHARS = 700  # a streamed message's last label holds at most about this much text
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")

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
    reasoning: str = ""  # a reasoning model's thinking before the answer ("": none)
    reasoning_ms: float | None = None  # how long it thought (None: unknown / still thinking)


def thought_title(reasoning_ms: float | None) -> str:
    """The reasoning block's header once the thinking is over."""
    if reasoning_ms is None:
        return "Thoughts"
    if reasoning_ms < 1000:
        return "Thought for a moment"
    seconds = round(reasoning_ms / 1000)
    if seconds < 60:
        return f"Thought for {seconds} s"
    minutes, seconds = divmod(seconds, 60)
    return f"Thought for {minutes} min {seconds} s" if seconds else f"Thought for {minutes} min"


def figures_text(data: MessageData, streaming: bool = False) -> str:
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
    elif data.status == "partial" and not streaming:
        parts.append("interrupted")
    elif data.status == "error":
        parts.append("error")
    return " · ".join(parts)


def _cut_point(text: str, start: int) -> int | None:
    """Where to end a frozen chunk of ``text[start:]``: after a blank line (else a line
    break) between 200 and CHUNK_CHARS characters in; None when there is none."""
    window = text[start : start + CHUNK_CHARS]
    for sep in ("\n\n", "\n"):
        i = window.rfind(sep)
        if i >= 100:
            return start + i + len(sep)
    return None


def _fence_after(fence: str, piece: str) -> str:
    """The code fence line still open after ``piece`` (which starts inside ``fence``
    when that is not empty)."""
    for line in piece.split("\n"):
        m = _FENCE.match(line)
        if not m:
            continue
        if not fence:
            fence = line.strip()
            continue
        opening = _FENCE.match(fence)
        marker = opening.group(1) if opening else "```"
        closing = line.strip()
        if set(closing) == {marker[0]} and len(closing) >= len(marker):
            fence = ""
    return fence


class TextLabel(QLabel):
    """A word-wrapped rich-text label that remembers its height for a width.

    Qt's layouts ask a label's ``heightForWidth`` several times per layout pass and a
    QLabel lays its whole text out again each time; with the cache, a long conversation
    costs nothing while only the last label changes."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._hfw: dict[int, int] = {}

    def setText(self, text: str) -> None:
        self._hfw.clear()
        super().setText(text)

    def heightForWidth(self, width: int) -> int:
        height = self._hfw.get(width)
        if height is None:
            if len(self._hfw) > 8:
                self._hfw.clear()
            height = super().heightForWidth(width)
            self._hfw[width] = height
        return height

    def changeEvent(self, event: QEvent) -> None:
        if event.type() in (QEvent.Type.FontChange, QEvent.Type.StyleChange):
            self._hfw.clear()
        super().changeEvent(event)


class ReasoningBlock(QFrame):
    """A collapsible block with a reasoning model's thinking, as plain text.

    The header is a checkable :class:`QToolButton` with an arrow (checked: expanded). Long
    text is split into several labels at line breaks, like the answer, so only the last
    (short) one changes while it streams; nothing is laid out while the block is collapsed.
    """

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("reasoning")
        self.setFrameShape(QFrame.Shape.NoFrame)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 2)
        layout.setSpacing(2)
        self.toggle = QToolButton(self)
        self.toggle.setObjectName("reasoning-toggle")
        self.toggle.setCheckable(True)
        self.toggle.setAutoRaise(True)
        self.toggle.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        self.toggle.setArrowType(Qt.ArrowType.RightArrow)
        self.toggle.setToolTip("Show or hide what the model thought before answering")
        self.toggle.toggled.connect(self._on_toggled)
        layout.addWidget(self.toggle)
        self.body = QFrame(self)
        self.body.setObjectName("reasoning-body")
        self.body.setFrameShape(QFrame.Shape.NoFrame)
        self._body_layout = QVBoxLayout(self.body)
        self._body_layout.setContentsMargins(14, 0, 0, 0)
        self._body_layout.setSpacing(0)
        self._labels: list[QLabel] = [self._new_label()]
        self._body_layout.addWidget(self._labels[0])
        self.body.setVisible(False)
        layout.addWidget(self.body)
        self._text = ""
        self._shown = ""  # the text the labels hold
        self._frozen = 0  # characters held by the labels before the last one

    def _new_label(self) -> QLabel:
        label = TextLabel()
        label.setObjectName("reasoning-text")
        label.setTextFormat(Qt.TextFormat.PlainText)  # never HTML: untrusted text
        label.setWordWrap(True)
        label.setTextInteractionFlags(
            Qt.TextInteractionFlag.TextSelectableByMouse
            | Qt.TextInteractionFlag.TextSelectableByKeyboard
        )
        label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Minimum)
        palette = label.palette()
        muted = palette.color(QPalette.ColorGroup.Disabled, QPalette.ColorRole.WindowText)
        palette.setColor(QPalette.ColorRole.WindowText, muted)
        label.setPalette(palette)
        return label

    @property
    def expanded(self) -> bool:
        return self.toggle.isChecked()

    def set_expanded(self, expanded: bool) -> None:
        self.toggle.setChecked(expanded)

    def title(self) -> str:
        return self.toggle.text()

    def set_title(self, title: str) -> None:
        if self.toggle.text() != title:
            self.toggle.setText(title)

    def text(self) -> str:
        return self._text

    def shown_text(self) -> str:
        """What the labels show (the text up to the last expansion or update)."""
        return "".join(label.text() for label in self._labels)

    def set_text(self, text: str) -> None:
        self._text = text
        if self.expanded:
            self._update_labels()

    @Slot(bool)
    def _on_toggled(self, expanded: bool) -> None:
        self.toggle.setArrowType(Qt.ArrowType.DownArrow if expanded else Qt.ArrowType.RightArrow)
        if expanded:
            self._update_labels()
        self.body.setVisible(expanded)

    def _update_labels(self) -> None:
        text = self._text
        if text == self._shown:
            return
        if not text.startswith(self._shown[: self._frozen]):
            for label in self._labels[:-1]:
                self._body_layout.removeWidget(label)
                label.deleteLater()
            self._labels = self._labels[-1:]
            self._frozen = 0
        while len(text) - self._frozen > CHUNK_CHARS:
            cut = _cut_point(text, self._frozen)
            if cut is None:
                break
            label = self._new_label()
            label.setText(text[self._frozen : cut].rstrip("\n"))
            self._body_layout.insertWidget(len(self._labels) - 1, label)
            self._labels.insert(len(self._labels) - 1, label)
            self._frozen = cut
        self._labels[-1].setText(text[self._frozen :])
        self._shown = text


class MessageWidget(QFrame):
    """One message: role, actions, content (Markdown for replies), figures."""

    action = Signal(str, int)

    def __init__(self, data: MessageData, dark: bool, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.data = data
        self._dark = dark
        self._code_blocks: list[str] = []
        self._streaming = False
        self.reasoning_block: ReasoningBlock | None = None
        self._auto_collapse = False  # collapse the block when the answer starts
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
        self.fork_button = self._button(
            "Fork", "fork", "Fork from here: a new tab with the conversation up to this message"
        )
        header.addWidget(self.fork_button)
        layout.addLayout(header)

        # Long text is split into several labels at block boundaries: a QLabel lays out
        # its whole text on every change, so only the last (short) one changes while a
        # reply streams. ``content`` is that last label.
        self._chunks: list[QLabel] = []  # frozen labels before ``content``
        self._chunk_blocks: dict[int, list[str]] = {}
        self._frozen = 0  # source characters shown by the frozen labels
        self._fence = ""  # the code fence open at the frozen boundary ("" if none)
        self._text_layout = QVBoxLayout()
        self._text_layout.setContentsMargins(0, 0, 0, 0)
        self._text_layout.setSpacing(0)
        self.content = self._new_label()
        self.content.setObjectName("content")
        self._text_layout.addWidget(self.content)
        self._reasoning_index = layout.count()  # the reasoning block goes above the text
        layout.addLayout(self._text_layout)

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

    def _apply_background(self, base: QColor | None = None) -> None:
        palette = self.palette()
        if base is None:
            base = palette.color(QPalette.ColorRole.Base)
        if self.data.role == "user":
            color = base.darker(106) if not self._dark else base.lighter(140)
        else:
            color = base
        palette.setColor(QPalette.ColorRole.Window, color)
        self.setPalette(palette)

    def set_dark(self, dark: bool, base: QColor | None = None) -> None:
        """Redo the colours for a new theme (``base``: the new palette's base colour)."""
        self._dark = dark
        self._apply_background(base)
        self.refresh()

    def set_streaming(self, streaming: bool) -> None:
        self._streaming = streaming
        self._sync_reasoning()
        self.set_actions_enabled(not streaming)
        self.figures.setText(figures_text(self.data, streaming))
        self.figures.setVisible(bool(self.figures.text()))

    def set_actions_enabled(self, enabled: bool) -> None:
        for button in self.findChildren(QToolButton):
            if button.objectName() not in ("copy", "reasoning-toggle"):
                button.setEnabled(enabled)
        if enabled:
            self._update_siblings()

    def set_content(self, text: str) -> None:
        self.data.content = text
        self._render()

    def set_reply(self, content: str, reasoning: str, reasoning_ms: float | None) -> None:
        """A streaming reply's answer and reasoning so far."""
        self.data.reasoning = reasoning
        self.data.reasoning_ms = reasoning_ms
        changed = content != self.data.content
        self.data.content = content
        self._sync_reasoning()
        if changed or not content:
            self._render()

    def _sync_reasoning(self) -> None:
        """Show ``data.reasoning`` in the reasoning block (none without reasoning)."""
        text = self.data.reasoning if self.data.role == "assistant" else ""
        block = self.reasoning_block
        if not text:
            if block is not None:
                block.setVisible(False)
            return
        thinking = self._streaming and not self.data.content
        if block is None:
            block = ReasoningBlock(self)
            layout = self.layout()
            assert isinstance(layout, QVBoxLayout)
            layout.insertWidget(self._reasoning_index, block)
            block.set_expanded(thinking)  # expanded while it streams, else collapsed
            block.toggle.clicked.connect(self._on_reasoning_clicked)
            self._auto_collapse = thinking
            self.reasoning_block = block
        block.setVisible(True)
        if thinking:
            block.set_title("Thinking…")
        else:
            block.set_title(thought_title(self.data.reasoning_ms))
            if self._auto_collapse:
                self._auto_collapse = False
                block.set_expanded(False)
        block.set_text(text)

    @Slot()
    def _on_reasoning_clicked(self) -> None:
        self._auto_collapse = False  # the user chose: leave the block as it is

    def update_data(self, data: MessageData) -> None:
        self.data = data
        self.refresh()

    def refresh(self) -> None:
        self._sync_reasoning()
        self._render()
        self.figures.setText(figures_text(self.data, self._streaming))
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

    def _new_label(self) -> QLabel:
        label = TextLabel()
        label.setObjectName("chunk")
        label.setWordWrap(True)
        label.setTextFormat(Qt.TextFormat.RichText)
        label.setOpenExternalLinks(False)
        label.setTextInteractionFlags(
            Qt.TextInteractionFlag.TextBrowserInteraction
            | Qt.TextInteractionFlag.TextSelectableByKeyboard
        )
        label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Minimum)
        label.linkActivated.connect(lambda href, lb=label: self._on_link_in(lb, href))
        return label

    def _reset_chunks(self) -> None:
        for label in self._chunks:
            self._text_layout.removeWidget(label)
            label.deleteLater()
        self._chunks = []
        self._chunk_blocks = {id(self.content): []}
        self._frozen = 0
        self._fence = ""

    def _render_source(self, source: str) -> tuple[str, list[str]]:
        if self.data.role == "assistant":
            rendered = markdown.render(source, markdown.Theme(self._dark))
            return rendered.html, rendered.code_blocks
        return markdown.render_plain(source), []

    def _render(self) -> None:
        data = self.data
        text = data.content
        if self._frozen > len(text) or not self._chunks_match(text):
            self._reset_chunks()
        # freeze finished blocks while the text beyond the frozen part is long
        while len(text) - self._frozen > CHUNK_CHARS:
            cut = _cut_point(text, self._frozen)
            if cut is None:
                break
            piece = text[self._frozen : cut]
            html, blocks = self._render_source(self._fence_prefix() + piece)
            label = self._new_label()
            label.setText(html)
            self._text_layout.insertWidget(len(self._chunks), label)
            self._chunks.append(label)
            self._chunk_blocks[id(label)] = blocks
            self._fence = _fence_after(self._fence, piece)
            self._frozen = cut
        self._frozen_text = text[: self._frozen]
        tail = text[self._frozen :]
        if data.role == "assistant" and not text and self._streaming and not data.reasoning:
            html, blocks = "<p><i>…</i></p>", []
        elif tail or not self._chunks:
            html, blocks = self._render_source(self._fence_prefix() + tail)
        else:
            html, blocks = "", []
        if data.error:
            color = (DARK_COLORS if self._dark else LIGHT_COLORS).error
            html += f'<p style="color:{color};">{markdown.render_plain(data.error)}</p>'
        self._chunk_blocks[id(self.content)] = blocks
        self.content.setVisible(bool(html))
        self.content.setText(html)

    def _chunks_match(self, text: str) -> bool:
        return not self._frozen or text.startswith(getattr(self, "_frozen_text", ""))

    def _fence_prefix(self) -> str:
        return self._fence + "\n" if self._fence else ""

    def _on_link_in(self, label: QLabel, href: str) -> None:
        self._code_blocks = self._chunk_blocks.get(id(label), [])
        self._on_link(href)

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
        out: list[str] = []
        for label in [*self._chunks, self.content]:
            out.extend(self._chunk_blocks.get(id(label), []))
        return out

    def labels(self) -> list[QLabel]:
        return [*self._chunks, self.content]


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
        self._base = self.palette().color(QPalette.ColorRole.Base)
        self.follow = True
        self._placeholder = QLabel()
        self._placeholder.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self._placeholder.setWordWrap(True)
        self._placeholder.setEnabled(False)
        self._layout.insertWidget(0, self._placeholder)
        bar = self.verticalScrollBar()
        bar.valueChanged.connect(self._on_scrolled)
        bar.rangeChanged.connect(self._on_range)

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

    def keep_first(self, n: int) -> None:
        """Remove every message widget after the first ``n``."""
        for w in self._widgets[n:]:
            w.setParent(None)
            w.deleteLater()
        del self._widgets[n:]
        self._placeholder.setVisible(bool(self._placeholder.text()) and not self._widgets)

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

    def changeEvent(self, event: QEvent) -> None:
        if event.type() == QEvent.Type.PaletteChange:
            # The children get the new palette after this event: give them its colours.
            dark = is_dark(self)
            base = self.palette().color(QPalette.ColorRole.Base)
            if dark != self._dark or base != self._base:
                self._dark, self._base = dark, base
                for w in self._widgets:
                    w.set_dark(dark, base)
        super().changeEvent(event)
