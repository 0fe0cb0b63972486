"""The message list of one tab: one small widget per message in a scroll area.

Only the message being streamed is re-rendered while text arrives; the view follows the
end unless the user scrolled up. Message actions are emitted as ``action(name, message_id)``
with name in copy, edit, regenerate, fork, prev, next.

The messages stand in a centred reading column (at most :data:`COLUMN_MAX_WIDTH` wide),
each with a role avatar; the user's are tinted bubbles, the assistant's plain cards. The
actions are small icon buttons shown while the pointer is over the message or the keyboard
focus is in it. :meth:`ChatView.set_editing` highlights the message being edited where it
stands; :meth:`ChatView.set_context_start` draws a divider above the first message the
model still sees.

A message's height is always its ``heightForWidth`` at the column's width: its labels'
vertical size policy is ``Preferred`` (with ``Minimum`` the label's ``sizeHint``, laid out
at a narrow default width, became a minimum height far taller than the text: the blank
page seen under restored chats).

A reasoning model's thinking shows in a :class:`ReasoningBlock` above the answer: expanded
with "Thinking…" while it streams, collapsed ("Thought for 12 s") once the answer starts;
a click on its header opens it again. It is plain text (the model's text is untrusted).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from PySide6.QtCore import QEvent, QObject, QPointF, QRectF, QSize, Qt, QTimer, QUrl, Signal, Slot
from PySide6.QtGui import (
    QColor,
    QDesktopServices,
    QEnterEvent,
    QFocusEvent,
    QGuiApplication,
    QIcon,
    QPainter,
    QPainterPath,
    QPaintEvent,
    QPalette,
    QPen,
    QPixmap,
    QPolygonF,
    QResizeEvent,
    QTextDocument,
)
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
from app.ui.theme import DARK_COLORS, LIGHT_COLORS, chat_colors, is_dark

CHUNK_CHARS = 700  # a streamed message's last label holds at most about this much text
SOFT_CUT_MIN = 200  # a cut inside a paragraph leaves at least this much in the frozen label
COLUMN_MAX_WIDTH = 820  # the reading column (full width when the view is narrower)
COLUMN_MARGIN = 12  # the column's least side margin
AVATAR_SIZE = 28
ACTION_SIZE = 24
COPIED_MS = 1500  # how long the Copy button says "Copied"
CONTEXT_START_TEXT = "Earlier messages are no longer seen by the model"
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
# What must not start the text after a cut inside a paragraph (Markdown would read a block)
_BLOCK_START = re.compile(r"^(?:[#>+\-*=|~`_\s]|\d+[.)])")
_JOIN_BOTTOM = '<p style="margin-bottom:0px;">'
_JOIN_TOP = '<p style="margin-top:0px;">'

ROLE_NAMES = {"user": "You", "assistant": "Assistant", "system": "System", "tool": "Tool"}
# How a reply ended (``MessageData.finish``, a FinishReason value), for the figures line;
# "aborted" and "error" are said by the status already.
FINISH_TEXT = {
    "eog": "end of reply",
    "length": "max tokens reached",
    "stop": "stop string",
    "context_full": "context full",
}


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
    finish: str | None = None  # how the reply ended: a FinishReason value (None: unknown)
    ttft_ms: float | None = None  # time to the first token: prompt processing + first step


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


def _duration(ms: float) -> str:
    return f"{ms:.0f} ms" if ms < 1000 else f"{ms / 1000:.1f} s"


def figures_text(data: MessageData, streaming: bool = False) -> str:
    parts: list[str] = []
    if data.token_count:
        parts.append(f"{data.token_count} tokens")
    if data.tokens_per_second:
        parts.append(f"{data.tokens_per_second:.1f} tok/s")
    if data.ttft_ms is not None and not streaming:
        parts.append(f"first token {_duration(data.ttft_ms)}")
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
    elif not streaming and data.finish in FINISH_TEXT:
        parts.append(FINISH_TEXT[data.finish])
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


# -- drawn icons (theme coloured; no files to find in a bundle)

_icons: dict[tuple[str, str], QIcon] = {}


def _blank_icon() -> QIcon:
    """A transparent icon: a hidden action draws nothing (a null icon shows its text)."""
    icon = _icons.get(("blank", ""))
    if icon is None:
        pixmap = QPixmap(32, 32)
        pixmap.setDevicePixelRatio(2.0)
        pixmap.fill(Qt.GlobalColor.transparent)
        icon = _icons[("blank", "")] = QIcon(pixmap)
    return icon


def action_icon(name: str, color: QColor) -> QIcon:
    """A 16 px line icon: copy, edit, regenerate, fork or copied (a check mark)."""
    key = (name, color.name())
    icon = _icons.get(key)
    if icon is not None:
        return icon
    pixmap = QPixmap(32, 32)
    pixmap.setDevicePixelRatio(2.0)
    pixmap.fill(Qt.GlobalColor.transparent)
    p = QPainter(pixmap)
    p.setRenderHint(QPainter.RenderHint.Antialiasing)
    pen = QPen(color, 1.5)
    pen.setCapStyle(Qt.PenCapStyle.RoundCap)
    pen.setJoinStyle(Qt.PenJoinStyle.RoundJoin)
    p.setPen(pen)
    p.setBrush(Qt.BrushStyle.NoBrush)
    if name == "copy":
        p.drawRoundedRect(QRectF(5.5, 2.5, 8, 9), 1.5, 1.5)
        p.setCompositionMode(QPainter.CompositionMode.CompositionMode_Clear)
        p.fillRect(QRectF(1.5, 4.5, 10, 11), Qt.GlobalColor.transparent)
        p.setCompositionMode(QPainter.CompositionMode.CompositionMode_SourceOver)
        p.drawRoundedRect(QRectF(2.5, 5.5, 8, 9), 1.5, 1.5)
    elif name == "edit":
        pencil = [(11, 2.5), (13.5, 5), (5.5, 13), (2.5, 13.5), (3, 10.5)]
        p.drawPolygon(QPolygonF([QPointF(x, y) for x, y in pencil]))
        p.drawLine(QPointF(9.5, 4), QPointF(12, 6.5))
    elif name == "regenerate":
        p.drawArc(QRectF(3, 3, 10, 10), 100 * 16, 290 * 16)
        a = math.radians(30)  # the arc's end, where the arrow points on
        end = QPointF(8 + 5 * math.cos(a), 8 - 5 * math.sin(a))
        p.drawLine(end, end + QPointF(-3.2, -0.6))
        p.drawLine(end, end + QPointF(0.6, -3.2))
    elif name == "fork":
        for x, y in ((4.5, 3.5), (4.5, 12.5), (11.5, 5.5)):
            p.drawEllipse(QPointF(x, y), 1.6, 1.6)
        p.drawLine(QPointF(4.5, 5.1), QPointF(4.5, 10.9))
        path = QPainterPath(QPointF(11.5, 7.1))
        path.cubicTo(QPointF(11.5, 10), QPointF(5, 8.5), QPointF(4.6, 10.9))
        p.drawPath(path)
    elif name == "copied":
        p.drawPolyline(QPolygonF([QPointF(3, 8.5), QPointF(6.5, 12), QPointF(13, 4.5)]))
    p.end()
    icon = QIcon(pixmap)
    _icons[key] = icon
    return icon


class _Avatar(QWidget):
    """A role's round badge: a person for the user, a spark for the assistant."""

    def __init__(self, role: str, dark: bool, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("avatar")
        self._role = role
        self._dark = dark
        self.setFixedSize(AVATAR_SIZE, AVATAR_SIZE)
        self.setAccessibleName(ROLE_NAMES.get(role, role))

    def set_dark(self, dark: bool) -> None:
        self._dark = dark
        self.update()

    def paintEvent(self, event: QPaintEvent) -> None:
        c = chat_colors(self._dark)
        p = QPainter(self)
        p.setRenderHint(QPainter.RenderHint.Antialiasing)
        p.setPen(Qt.PenStyle.NoPen)
        fill = c.avatar_user if self._role == "user" else c.avatar_assistant
        p.setBrush(QColor(fill))
        p.drawEllipse(QRectF(0, 0, AVATAR_SIZE, AVATAR_SIZE))
        p.setBrush(QColor(c.avatar_fg))
        m = AVATAR_SIZE / 28  # drawn on a 28 px grid
        if self._role == "user":
            p.drawEllipse(QPointF(14 * m, 10.5 * m), 4.2 * m, 4.2 * m)
            body = QPainterPath(QPointF(6.5 * m, 21.5 * m))
            body.cubicTo(
                QPointF(7 * m, 15 * m), QPointF(21 * m, 15 * m), QPointF(21.5 * m, 21.5 * m)
            )
            body.closeSubpath()
            p.drawPath(body)
        else:
            star = QPainterPath(QPointF(14 * m, 6 * m))
            for x, y in ((16 * m, 12 * m), (22 * m, 14 * m), (16 * m, 16 * m)):
                star.lineTo(x, y)
            for x, y in ((14 * m, 22 * m), (12 * m, 16 * m), (6 * m, 14 * m), (12 * m, 12 * m)):
                star.lineTo(x, y)
            star.closeSubpath()
            p.drawPath(star)
        p.end()


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


class TextLabel(QLabel):
    """A word-wrapped rich-text label whose height is its ``heightForWidth``, remembered.

    Qt's layouts ask a label's ``heightForWidth`` several times per layout pass and a
    QLabel lays its whole text out again each time; with the cache, a long conversation
    costs nothing while only the last label changes. QLabel's own size hints lay the text
    out three more times (at its preferred, at zero and at unbounded width) on every
    change; in a layout with height-for-width they only give the minimum, so cheap hints
    stand in for them (measured: half the cost of a streamed update)."""

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

    def sizeHint(self) -> QSize:
        line = self.fontMetrics().height()
        return QSize(line * 20, line) if self.text() else QSize(0, 0)

    def minimumSizeHint(self) -> QSize:
        return QSize(0, self.fontMetrics().height() if self.text() else 0)

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
        label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
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
        self.avatar = _Avatar(data.role, dark, self)
        outer.addWidget(self.avatar, 0, Qt.AlignmentFlag.AlignTop)
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
        if data.role == "assistant":
            self.regen_button = self._icon_button(
                "regenerate", "regenerate", "Regenerate", "Write this reply again"
            )
            header.addWidget(self.regen_button)
        self.fork_button = self._icon_button(
            "fork",
            "fork",
            "Fork",
            "Fork from here: a new tab with the conversation up to this message",
        )
        header.addWidget(self.fork_button)
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
        self._chunks: list[QLabel] = []  # frozen labels before ``content``
        self._chunk_blocks: dict[int, list[str]] = {}
        self._frozen = 0  # source characters shown by the frozen labels
        self._frozen_text = ""
        self._fence = ""  # the code fence open at the frozen boundary ("" if none)
        self._joined = False  # the frozen boundary is inside a paragraph (a soft cut)
        self._soft_width = 0  # the label width the soft cuts were made for (0: none)
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
        self.figures.setEnabled(False)  # the palette's muted text colour
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
            button.setIcon(action_icon(name, color) if shown else _blank_icon())

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
        self.avatar.set_dark(self._dark)
        self._update_actions()

    def set_dark(self, dark: bool, base: QColor | None = None) -> None:
        """Redo the colours for a new theme (``base``: the new palette's base colour)."""
        self._dark = dark
        self._apply_colors(base)
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

    def set_streaming(self, streaming: bool) -> None:
        self._streaming = streaming
        if not streaming and self._soft_width:
            self._reset_chunks()  # the paragraphs cut while streaming become whole again
            self._render()
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
            cut = _cut_point(text, self._frozen)
            soft = cut is None
            if cut is None:
                cut = self._soft_cut_point(text, self._frozen)
                if cut is None:
                    break
            piece = text[self._frozen : cut]
            html, blocks = self._render_source(self._fence_prefix() + piece)
            html = self._join_html(html, bottom=soft)
            self._joined = soft
            if soft:
                self._soft_width = self.content.contentsRect().width()
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
            html = self._join_html(html, bottom=False)
        else:
            html, blocks = "", []
        if data.error:
            color = (DARK_COLORS if self._dark else LIGHT_COLORS).error
            html += f'<p style="color:{color};">{markdown.render_plain(data.error)}</p>'
        self._chunk_blocks[id(self.content)] = blocks
        self.content.setVisible(bool(html))
        self.content.setText(html)

    def _join_html(self, html: str, bottom: bool) -> str:
        """Remove the paragraph spacing where a paragraph goes on in the next label (after
        a soft cut: at the top when the frozen boundary is one, at the bottom when
        ``bottom``)."""
        if self._joined and html.startswith("<p>"):
            html = _JOIN_TOP + html[3:]
        if bottom:
            i = html.rfind("<p")
            if i >= 0 and html.startswith("<p>", i):
                html = html[:i] + _JOIN_BOTTOM + html[i + 3 :]
            elif i >= 0 and html.startswith(_JOIN_TOP, i):
                html = (
                    html[:i]
                    + '<p style="margin-top:0px; margin-bottom:0px;">'
                    + html[i + len(_JOIN_TOP) :]
                )
        return html

    def _soft_cut_point(self, text: str, start: int) -> int | None:
        """While a reply streams: where to end a frozen chunk inside a long paragraph, at
        the start of one of its lines as the label lays it out now; None when there is
        none. Lines are broken greedily, so a line's start does not move when text is
        added after the next line. Without a line break in sight (a paragraph with inline
        markup the laid-out text does not match), a cut at a space once the tail is two
        chunks long: its ragged line lasts until the reply ends."""
        if not self._streaming or self._fence or self.data.role != "assistant":
            return None
        width = self.content.contentsRect().width()
        window = text[start : start + CHUNK_CHARS]
        if width >= 80 and (not self._soft_width or width == self._soft_width):
            cut = self._line_start_cut(text, start, window, width)
            if cut is not None:
                return cut
        if len(text) - start < 2 * CHUNK_CHARS:
            return None
        at = window.rfind(" ", SOFT_CUT_MIN)
        while at > SOFT_CUT_MIN and _BLOCK_START.match(window[at + 1 :]):
            at = window.rfind(" ", SOFT_CUT_MIN, at)
        return start + at + 1 if at > SOFT_CUT_MIN else None

    def _line_start_cut(self, text: str, start: int, window: str, width: int) -> int | None:
        """The start of one of the window's laid-out lines, when its last paragraph is
        plain text (None otherwise)."""
        para = window.rfind("\n") + 1
        html = self._render_source(window)[0]
        if self._joined and html.startswith("<p>"):
            html = _JOIN_TOP + html[3:]
        doc = QTextDocument()
        doc.setDocumentMargin(0)
        doc.setDefaultFont(self.content.font())
        doc.setHtml(html)
        doc.setTextWidth(width)
        doc.size()  # lays the document out
        block = doc.lastBlock()
        while block.isValid() and not block.text() and block != doc.firstBlock():
            block = block.previous()
        if block.text().rstrip() == window[para:].rstrip():
            layout = block.layout()
            # the window's last line (maybe cut in a word) and the one before may change
            for i in range(layout.lineCount() - 2, 0, -1):
                at = para + layout.lineAt(i).textStart()
                if at < SOFT_CUT_MIN:
                    break
                cut = start + at
                if text[cut - 1] == " " and not _BLOCK_START.match(text[cut:]):
                    return cut
        return None

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

    def code_blocks(self) -> list[str]:
        out: list[str] = []
        for label in [*self._chunks, self.content]:
            out.extend(self._chunk_blocks.get(id(label), []))
        return out

    def labels(self) -> list[QLabel]:
        return [*self._chunks, self.content]


_SCROLL_BAR_STYLE = """
QScrollBar:vertical { background: transparent; width: 10px; margin: 0px; }
QScrollBar::handle:vertical {
    background: rgba(128, 128, 128, 120); border-radius: 3px; min-height: 28px; margin: 2px;
}
QScrollBar::handle:vertical:hover { background: rgba(128, 128, 128, 190); }
QScrollBar::add-line:vertical, QScrollBar::sub-line:vertical { height: 0px; }
QScrollBar::add-page:vertical, QScrollBar::sub-page:vertical { background: none; }
"""


class _Divider(QLabel):
    """A line across the column with a sentence in its middle."""

    def __init__(self, text: str, parent: QWidget | None = None) -> None:
        super().__init__(text, parent)
        self.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.setEnabled(False)  # the palette's muted text colour
        self.setContentsMargins(0, 8, 0, 8)

    def paintEvent(self, event: QPaintEvent) -> None:
        super().paintEvent(event)
        color = self.palette().color(QPalette.ColorGroup.Disabled, QPalette.ColorRole.WindowText)
        color.setAlpha(140)
        p = QPainter(self)
        p.setPen(QPen(color, 1))
        text = self.fontMetrics().horizontalAdvance(self.text())
        mid, y = self.width() / 2, self.height() / 2
        left, right = mid - text / 2 - 10, mid + text / 2 + 10
        if left > 8:
            p.drawLine(QPointF(8, y), QPointF(left, y))
            p.drawLine(QPointF(right, y), QPointF(self.width() - 8, y))
        p.end()


class _Body(QWidget):
    """The scroll area's widget: its side margins keep the messages in a centred column."""

    def __init__(self) -> None:
        super().__init__()
        self.setObjectName("chat-body")
        self.column = QVBoxLayout(self)
        self.column.setContentsMargins(COLUMN_MARGIN, 8, COLUMN_MARGIN, 8)
        self.column.setSpacing(2)

    def side_margin(self, width: int) -> int:
        return max(COLUMN_MARGIN, (width - COLUMN_MAX_WIDTH) // 2)

    def resizeEvent(self, event: QResizeEvent) -> None:
        side = self.side_margin(event.size().width())
        margins = self.column.contentsMargins()
        if margins.left() != side:
            self.column.setContentsMargins(side, margins.top(), side, margins.bottom())
        super().resizeEvent(event)


class ChatView(QScrollArea):
    """The messages of the branch shown; see the module docstring."""

    action = Signal(str, int)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWidgetResizable(True)
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self._body = _Body()
        self._layout = self._body.column
        self._layout.addStretch(1)
        self.setWidget(self._body)
        # the page is the base colour around the column too
        self.viewport().setBackgroundRole(QPalette.ColorRole.Base)
        self._widgets: list[MessageWidget] = []
        self._dark = is_dark(self)
        self._base = self.palette().color(QPalette.ColorRole.Base)
        self.follow = True
        self._editing_id: int | None = None
        self._context_start_id: int | None = None
        self._placeholder = QLabel()
        self._placeholder.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self._placeholder.setWordWrap(True)
        self._placeholder.setEnabled(False)
        self._layout.insertWidget(0, self._placeholder)
        self._divider = _Divider(CONTEXT_START_TEXT, self._body)
        self._divider.setObjectName("context-start")
        self._divider.setToolTip(
            "The model's context holds the messages below this line (and its reply); the "
            "ones above are kept here and on disk, but the model no longer reads them."
        )
        self._divider.setVisible(False)
        bar = self.verticalScrollBar()
        # A slim flat bar. Also a measured cost: the style's bar is drawn from pixmaps
        # cached by the handle's length, which changes with every streamed line (a cache
        # miss and ~3 ms per paint); the style sheet's rectangles cost almost nothing.
        bar.setStyleSheet(_SCROLL_BAR_STYLE)
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
        self._place_divider()

    def set_messages(self, messages: list[MessageData]) -> None:
        self.setUpdatesEnabled(False)
        try:
            self.clear()
            for data in messages:
                self._add(data)
            self._place_divider()
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
        self._place_divider()

    def append(self, data: MessageData) -> MessageWidget:
        widget = self._add(data)
        if data.id == self._context_start_id:
            self._place_divider()
        self.follow = True
        self.scroll_to_end()
        return widget

    def _add(self, data: MessageData) -> MessageWidget:
        widget = MessageWidget(data, self._dark, self._body)
        widget.action.connect(self.action)
        self._layout.insertWidget(self._layout.count() - 1, widget)
        self._widgets.append(widget)
        self._placeholder.setVisible(False)
        if data.id == self._editing_id:
            widget.set_editing(True)
        return widget

    def last(self) -> MessageWidget | None:
        return self._widgets[-1] if self._widgets else None

    def widget_for(self, message_id: int) -> MessageWidget | None:
        return next((w for w in self._widgets if w.data.id == message_id), None)

    def set_actions_enabled(self, enabled: bool) -> None:
        for w in self._widgets:
            if not w._streaming:
                w.set_actions_enabled(enabled)

    # -- editing in place, the context's start

    def set_editing(self, message_id: int | None) -> None:
        """Highlight the message being edited (None: none); kept across a rebuild."""
        self._editing_id = message_id
        for w in self._widgets:
            w.set_editing(w.data.id == message_id)

    def editing_id(self) -> int | None:
        return self._editing_id

    def set_context_start(self, message_id: int | None) -> None:
        """Draw the divider "earlier messages are no longer seen by the model" above this
        message (None, or a message not shown: no divider)."""
        self._context_start_id = message_id
        self._place_divider()

    def context_start_id(self) -> int | None:
        return self._context_start_id

    def divider(self) -> QLabel:
        return self._divider

    def _place_divider(self) -> None:
        widget = self.widget_for(self._context_start_id) if self._context_start_id else None
        index = self._layout.indexOf(widget) if widget is not None else -1
        current = self._layout.indexOf(self._divider)
        if index >= 0 and current == index - 1:
            return  # already there
        if current >= 0:
            self._layout.removeWidget(self._divider)
        if widget is None:
            self._divider.setVisible(False)
            return
        self._layout.insertWidget(self._layout.indexOf(widget), self._divider)
        self._divider.setVisible(True)

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
