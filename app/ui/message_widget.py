"""One message of the chat view: :class:`MessageWidget`, its avatar and card, its icon
actions shown on hover or keyboard focus, and its text in several labels.

A message's height is always its ``heightForWidth`` at the column's width: its labels'
vertical size policy is ``Preferred`` (with ``Minimum`` the label's ``sizeHint``, laid out
at a narrow default width, became a minimum height far taller than the text: the blank
page seen under restored chats).
"""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject, QRectF, QSize, Qt, QTimer, QUrl, Signal, Slot
from PySide6.QtGui import (
    QColor,
    QDesktopServices,
    QEnterEvent,
    QFocusEvent,
    QGuiApplication,
    QPainter,
    QPaintEvent,
    QPalette,
    QPen,
    QResizeEvent,
)
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QSizePolicy,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.ui import markdown
from app.ui.message_avatar import Avatar
from app.ui.message_data import ROLE_NAMES, MessageData, figures_text, thought_title
from app.ui.message_icons import action_icon, blank_icon
from app.ui.reasoning_block import ReasoningBlock
from app.ui.stream_chunks import CHUNK_CHARS, cut_point, fence_after, join_html, soft_cut_point
from app.ui.text_label import TextLabel
from app.ui.theme import DARK_COLORS, LIGHT_COLORS, chat_colors, set_muted
from app.ui.tool_call_block import ToolCallList

ACTION_SIZE = 24
COPIED_MS = 1500  # how long the Copy button says "Copied"
SOFT_CUT_RETRY = 40  # characters of new text before a soft cut that found none is tried again


class _Card(QFrame):
    """A message's rounded card: ``fill`` and ``border`` colours (None: none)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("card")
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.fill: QColor | None = None
        self.border: QColor | None = None
        self.border_width = 1.0

    def paintEvent(self, event: QPaintEvent) -> None:
        if self.fill is None and self.border is None:
            return
        p = QPainter(self)
        p.setRenderHint(QPainter.RenderHint.Antialiasing)
        half = self.border_width / 2
        rect = QRectF(self.rect()).adjusted(half, half, -half, -half)
        p.setPen(QPen(self.border, self.border_width) if self.border else Qt.PenStyle.NoPen)
        p.setBrush(self.fill if self.fill is not None else Qt.BrushStyle.NoBrush)
        p.drawRoundedRect(rect, 8, 8)
        p.end()


class MessageWidget(QFrame):
    """One message: avatar, and a card with role, actions, content (Markdown for replies,
    code spans and fences for the user's), figures."""

    action = Signal(str, int)

    def __init__(self, data: MessageData, dark: bool, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.data = data
        self._dark = dark
        self._code_blocks: list[str] = []
        self._streaming = False
        self._editing = False
        self._hovered = False
        self._focused = 0  # action buttons holding the keyboard focus (0 or 1)
        self.reasoning_block: ReasoningBlock | None = None
        self._auto_collapse = False  # collapse the block when the answer starts
        self.setObjectName("message-" + data.role)
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setAutoFillBackground(True)
        # Preferred, not Maximum: the height is the layout's height for the width
        self.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Preferred)

        outer = QHBoxLayout(self)
        outer.setContentsMargins(0, 6, 0, 6)
        outer.setSpacing(10)
        self.avatar = Avatar(data.role, dark, self)
        outer.addWidget(self.avatar, 0, Qt.AlignmentFlag.AlignTop)
        if data.role == "document":  # text completion's document: one text, no speaker
            self.avatar.hide()
        self.card = _Card(self)
        outer.addWidget(self.card, 1)
        layout = QVBoxLayout(self.card)
        layout.setContentsMargins(12, 6, 12, 8)
        layout.setSpacing(4)
        self._card_layout = layout
        header = QHBoxLayout()
        header.setSpacing(2)
        self.role_label = QLabel(f"<b>{ROLE_NAMES.get(data.role, data.role)}</b>")
        self.role_label.setObjectName("role")
        header.addWidget(self.role_label)
        if data.role == "document":
            # hide() only: a show() here, before the header is in a laid-out widget, made
            # the label a window of its own and took the focus from the main window
            self.role_label.hide()
        self.editing_tag = QLabel("Editing")
        self.editing_tag.setObjectName("editing-tag")
        self.editing_tag.setToolTip("This message is in the composer below: send or cancel")
        self.editing_tag.setVisible(False)
        header.addSpacing(6)
        header.addWidget(self.editing_tag)
        header.addStretch(1)
        self.prev_button = self._text_button("‹", "prev", "Previous version")
        self.sibling_label = QLabel()
        self.next_button = self._text_button("›", "next", "Next version")
        for w in (self.prev_button, self.sibling_label, self.next_button):
            header.addWidget(w)
        self._actions: list[tuple[QToolButton, str]] = []
        # "Copied" beside the button for a moment (a label: a tooltip would need a popup)
        self.copied_label = QLabel("Copied")
        self.copied_label.setObjectName("copied")
        self.copied_label.setEnabled(False)
        self.copied_label.setVisible(False)
        header.addWidget(self.copied_label)
        self.copy_button = self._icon_button("copy", "copy", "Copy", "Copy this message")
        self.copy_button.clicked.connect(self._show_copied)
        header.addWidget(self.copy_button)
        if data.role == "user":
            self.edit_button = self._icon_button(
                "edit", "edit", "Edit", "Edit and resend this message"
            )
            header.addWidget(self.edit_button)
        if data.role in ("assistant", "document"):
            self.regen_button = self._icon_button(
                "regenerate",
                "regenerate",
                "Regenerate",
                "Write this reply again"
                if data.role == "assistant"
                else "Write the model's last part of the text again",
            )
            header.addWidget(self.regen_button)
        self.fork_button = self._icon_button(
            "fork",
            "fork",
            "Fork",
            "Fork from here: a new tab with the conversation up to this message",
        )
        header.addWidget(self.fork_button)
        self.delete_button = self._icon_button(
            "delete", "delete", "Delete", "Delete this message (the messages below it stay)"
        )
        header.addWidget(self.delete_button)
        layout.addLayout(header)
        self._copied = QTimer(self)
        self._copied.setSingleShot(True)
        self._copied.setInterval(COPIED_MS)
        self._copied.timeout.connect(self._end_copied)

        # Long text is split into several labels at block boundaries: a QLabel lays out
        # its whole text on every change, so only the last (short) one changes while a
        # reply streams. ``content`` is that last label. While a reply streams, a long
        # paragraph is also cut, at the start of one of its lines as laid out at the
        # label's width (the labels then show the very lines the paragraph has); such
        # cuts are undone when the reply ends, and redone when the width changes.
        self._chunks: list[TextLabel] = []  # frozen labels before ``content``
        self._chunk_blocks: dict[int, list[str]] = {}
        self._frozen = 0  # source characters shown by the frozen labels
        self._frozen_text = ""
        self._fence = ""  # the code fence open at the frozen boundary ("" if none)
        self._joined = False  # the frozen boundary is inside a paragraph (a soft cut)
        self._soft_width = 0  # the label width the soft cuts were made for (0: none)
        self._cut_tried = (-1, 0)  # where a soft cut last found none, and the text's length
        self._rewrap = QTimer(self)
        self._rewrap.setSingleShot(True)
        self._rewrap.setInterval(120)
        self._rewrap.timeout.connect(self._on_rewrap)
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
        set_muted(self.figures, dark)
        layout.addWidget(self.figures)
        self._apply_colors()
        self.refresh()

    # -- actions

    def _text_button(self, text: str, name: str, tip: str) -> QToolButton:
        button = QToolButton(self.card)
        button.setText(text)
        button.setToolTip(tip)
        button.setAccessibleName(tip)
        button.setAutoRaise(True)
        button.setObjectName(name)
        button.clicked.connect(lambda: self.action.emit(name, self.data.id))
        return button

    def _icon_button(self, icon: str, name: str, text: str, tip: str) -> QToolButton:
        button = self._text_button(text, name, tip)
        button.setAccessibleName(text)
        button.setAccessibleDescription(tip)
        button.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonIconOnly)
        button.setIconSize(QSize(16, 16))
        # a fixed size: the header does not move when the icons show or hide
        button.setFixedSize(ACTION_SIZE, ACTION_SIZE)
        button.installEventFilter(self)
        self._actions.append((button, icon))
        return button

    def revealed(self) -> bool:
        """Whether the action icons show: pointer over the message, or focus in them."""
        return self._hovered or self._focused > 0 or self._editing

    def _update_actions(self) -> None:
        # Hidden by painting no icon, not by hiding: the buttons keep their place and
        # stay in the Tab order, so the keyboard reaches them and shows them.
        shown = self.revealed()
        color = self.palette().color(QPalette.ColorRole.WindowText)
        for button, icon in self._actions:
            name = "copied" if button is self.copy_button and self._copied.isActive() else icon
            button.setIcon(action_icon(name, color) if shown else blank_icon())

    def enterEvent(self, event: QEnterEvent) -> None:
        self._hovered = True
        self._update_actions()
        super().enterEvent(event)

    def leaveEvent(self, event: QEvent) -> None:
        self._hovered = False
        self._update_actions()
        super().leaveEvent(event)

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if isinstance(event, QFocusEvent):
            if event.type() == QEvent.Type.FocusIn:
                self._focused = 1
                self._update_actions()
            elif event.type() == QEvent.Type.FocusOut:
                self._focused = 0
                self._update_actions()
        return False

    @Slot()
    def _show_copied(self) -> None:
        """Feedback for Copy: a check mark and "Copied" for a moment."""
        self._copied.start()
        button = self.copy_button
        button.setToolTip("Copied")
        button.setText("Copied")
        self.copied_label.setVisible(True)
        self._update_actions()

    @Slot()
    def _end_copied(self) -> None:
        self.copy_button.setToolTip("Copy this message")
        self.copy_button.setText("Copy")
        self.copied_label.setVisible(False)
        self._update_actions()

    def copied_feedback(self) -> bool:
        """Whether the Copy button says "Copied" now."""
        return self._copied.isActive()

    # -- colours and states

    def _apply_colors(self, base: QColor | None = None) -> None:
        palette = self.palette()
        if base is None:
            base = palette.color(QPalette.ColorRole.Base)
        palette.setColor(QPalette.ColorRole.Window, base)
        self.setPalette(palette)
        c = chat_colors(self._dark)
        card = self.card
        if self._editing:
            card.fill, card.border, card.border_width = (
                QColor(c.editing_fill),
                QColor(c.editing_border),
                2.0,
            )
        elif self.data.role == "user":
            card.fill, card.border, card.border_width = (
                QColor(c.user_bubble),
                QColor(c.user_border),
                1.0,
            )
        else:
            card.fill, card.border = None, None
        self.editing_tag.setStyleSheet(
            f"QLabel {{ color: {c.editing_border}; font-weight: bold; }}"
        )
        card.update()
        set_muted(self.figures, self._dark)
        self.avatar.set_dark(self._dark)
        self._update_actions()

    def set_dark(self, dark: bool, base: QColor | None = None) -> None:
        """Redo the colours for a new theme (``base``: the new palette's base colour)."""
        self._dark = dark
        self._apply_colors(base)
        # The frozen chunks of a long reply hold HTML with the old theme's colours baked
        # in (code blocks, inline code): render them all again, not only the live tail.
        self._reset_chunks()
        self.refresh()

    def set_editing(self, editing: bool) -> None:
        """Highlight this message as the one being edited (border, tint, "Editing")."""
        if editing == self._editing:
            return
        self._editing = editing
        self.editing_tag.setVisible(editing)
        self._apply_colors(self.palette().color(QPalette.ColorRole.Window))

    @property
    def editing(self) -> bool:
        return self._editing

    def is_streaming(self) -> bool:
        """Whether the reply in this widget is being written."""
        return self._streaming

    def set_streaming(self, streaming: bool) -> None:
        self._streaming = streaming
        if not streaming and self._soft_width:
            self._reset_chunks()  # the paragraphs cut while streaming become whole again
            self._render()
        if not streaming:
            for label in self._chunks:
                label.unpin_height()  # heights for the width again, as any message's
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
            block = ReasoningBlock(self.card)
            self._card_layout.insertWidget(self._reasoning_index, block)
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

    # -- text

    def _new_label(self) -> TextLabel:
        label = TextLabel()
        label.setObjectName("chunk")
        label.setWordWrap(True)
        label.setTextFormat(Qt.TextFormat.RichText)
        label.setOpenExternalLinks(False)
        label.setTextInteractionFlags(
            Qt.TextInteractionFlag.TextBrowserInteraction
            | Qt.TextInteractionFlag.TextSelectableByKeyboard
        )
        label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        label.linkActivated.connect(lambda href, lb=label: self._on_link_in(lb, href))
        return label

    def _reset_chunks(self) -> None:
        for label in self._chunks:
            self._text_layout.removeWidget(label)
            label.deleteLater()
        self._chunks = []
        self._chunk_blocks = {id(self.content): []}
        self._frozen = 0
        self._frozen_text = ""
        self._fence = ""
        self._joined = False
        self._soft_width = 0

    def _render_source(self, source: str) -> tuple[str, list[str]]:
        theme = markdown.Theme(self._dark)
        if self.data.role == "assistant":
            rendered = markdown.render(source, theme)
        else:
            rendered = markdown.render_user(source, theme)
        return rendered.html, rendered.code_blocks

    def _render(self) -> None:
        data = self.data
        text = data.content
        if self._frozen > len(text) or not self._chunks_match(text):
            self._reset_chunks()
        # freeze finished blocks while the text beyond the frozen part is long
        while len(text) - self._frozen > CHUNK_CHARS:
            cut = cut_point(text, self._frozen)
            soft = cut is None
            if cut is None:
                cut = self._soft_cut_point(text, self._frozen)
                if cut is None:
                    break
            piece = text[self._frozen : cut]
            html, blocks = self._render_source(self._fence_prefix() + piece)
            html = join_html(html, self._joined, bottom=soft)
            self._joined = soft
            if soft:
                self._soft_width = self.content.contentsRect().width()
            label = self._new_label()
            label.setText(html)
            self._text_layout.insertWidget(len(self._chunks), label)
            # shown now, not when the layout's queued show comes: a pass without it
            # moved the labels after it up, then back down (each one repainted)
            label.show()
            if self._streaming:
                # at the live label's width: where the layout puts it (see pin_height)
                label.pin_height(self.content.width())
            self._chunks.append(label)
            self._chunk_blocks[id(label)] = blocks
            self._fence = fence_after(self._fence, piece)
            self._frozen = cut
        self._frozen_text = text[: self._frozen]
        tail = text[self._frozen :]
        if data.role == "assistant" and not text and self._streaming and not data.reasoning:
            html, blocks = "<p><i>…</i></p>", []
        elif tail or not self._chunks:
            html, blocks = self._render_source(self._fence_prefix() + tail)
            html = join_html(html, self._joined, bottom=False)
        else:
            html, blocks = "", []
        if data.error:
            color = (DARK_COLORS if self._dark else LIGHT_COLORS).error
            html += f'<p style="color:{color};">{markdown.render_plain(data.error)}</p>'
        self._chunk_blocks[id(self.content)] = blocks
        self.content.setVisible(bool(html))
        self.content.setText(html)

    def _soft_cut_point(self, text: str, start: int) -> int | None:
        """While a reply streams: where to end a frozen chunk inside a long paragraph
        (see :func:`soft_cut_point`); None when there is none."""
        if not self._streaming or self._fence or self.data.role != "assistant":
            return None
        # A try lays the window out in a document of its own: after one that found no
        # cut, the next waits for a line's worth of new text (not every paint).
        if start == self._cut_tried[0] and len(text) < self._cut_tried[1] + SOFT_CUT_RETRY:
            return None
        cut = soft_cut_point(
            text, start, self.content, self._soft_width, self._joined, self._render_source
        )
        self._cut_tried = (-1, 0) if cut is not None else (start, len(text))
        return cut

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        if self._soft_width and event.size().width() != event.oldSize().width():
            self._rewrap.start()  # once the width settles

    @Slot()
    def _on_rewrap(self) -> None:
        if self._soft_width and self.content.contentsRect().width() != self._soft_width:
            self._reset_chunks()
            self._render()

    def _chunks_match(self, text: str) -> bool:
        return not self._frozen or text.startswith(self._frozen_text)

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

    def tool_calls(self) -> ToolCallList:
        """The message's tool-call blocks, under its text (made on first use)."""
        calls = self.findChild(ToolCallList, "tool-calls")
        if calls is None:
            calls = ToolCallList(self.card)
            self._card_layout.insertWidget(self._card_layout.indexOf(self.figures), calls)
        return calls

    def code_blocks(self) -> list[str]:
        out: list[str] = []
        for label in [*self._chunks, self.content]:
            out.extend(self._chunk_blocks.get(id(label), []))
        return out

    def labels(self) -> list[TextLabel]:
        return [*self._chunks, self.content]
