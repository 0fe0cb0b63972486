"""The sidebar's painting: :class:`RowDelegate` draws a row (its date-group header, the
current chat's accent, the pin, a search snippet with its matches in bold), and
:func:`paint_pin` the pin itself (the context menu's icon too, :func:`pin_icon`)."""

from __future__ import annotations

from PySide6.QtCore import QPointF, QRect, QSize, Qt
from PySide6.QtGui import (
    QColor,
    QFont,
    QFontMetrics,
    QIcon,
    QPainter,
    QPainterPath,
    QPalette,
    QPen,
    QPixmap,
)
from PySide6.QtWidgets import (
    QApplication,
    QStyle,
    QStyledItemDelegate,
    QStyleOptionViewItem,
    QWidget,
)

from app.ui.sidebar_model import (
    CurrentRole,
    DetailRole,
    HeaderRole,
    Index,
    PinnedRole,
    SubtitleRole,
    split_marks,
)
from app.ui.wording import FORK_SUFFIX

# -- the pin icon ------------------------------------------------------------------------


def elide_title(title: str, metrics: QFontMetrics, width: int) -> str:
    """``title`` cut with "…" to ``width``; a fork's " (fork)" stays in view (cut at the
    end, a fork's row looked exactly like its original's)."""
    suffix = FORK_SUFFIX if title.endswith(FORK_SUFFIX) else ""
    if not suffix or metrics.horizontalAdvance(title) <= width:
        return metrics.elidedText(title, Qt.TextElideMode.ElideRight, width)
    room = max(0, width - metrics.horizontalAdvance(suffix))
    base = title[: len(title) - len(suffix)]
    return metrics.elidedText(base, Qt.TextElideMode.ElideRight, room) + suffix


def paint_pin(painter: QPainter, rect: QRect, color: QColor) -> None:
    """A push pin (head, body, needle) leaning right, in ``color``: drawn, because the 📌
    emoji is an empty box where the system has no colour emoji font."""
    side = min(rect.width(), rect.height())
    if side <= 0:
        return
    painter.save()
    painter.setRenderHint(QPainter.RenderHint.Antialiasing)
    painter.translate(rect.center().x() + 0.5, rect.center().y() + 0.5)
    painter.rotate(40)
    s = side / 16.0
    painter.setPen(Qt.PenStyle.NoPen)
    painter.setBrush(color)
    body = QPainterPath()
    body.addRoundedRect(-3.0 * s, -7.0 * s, 6.0 * s, 2.2 * s, 0.8 * s, 0.8 * s)  # head
    body.addRect(-1.6 * s, -5.0 * s, 3.2 * s, 4.2 * s)  # body
    body.addRoundedRect(-4.4 * s, -1.2 * s, 8.8 * s, 2.0 * s, 0.8 * s, 0.8 * s)  # collar
    painter.drawPath(body.simplified())
    pen = QPen(color, max(1.0, 1.3 * s))
    pen.setCapStyle(Qt.PenCapStyle.RoundCap)
    painter.setPen(pen)
    painter.drawLine(QPointF(0, 0.8 * s), QPointF(0, 7.0 * s))  # needle
    painter.restore()


def pin_icon(color: QColor, size: int = 16) -> QIcon:
    pixmap = QPixmap(size, size)
    pixmap.fill(Qt.GlobalColor.transparent)
    painter = QPainter(pixmap)
    paint_pin(painter, QRect(0, 0, size, size), color)
    painter.end()
    return QIcon(pixmap)


# -- painting ----------------------------------------------------------------------------


class RowDelegate(QStyledItemDelegate):
    """A row: the title (bold for the current chat, a pin icon when pinned, a detail such
    as "3 matches" at the right), then the age and size or the search snippet, smaller
    and muted. The first row of a date group carries the group's header above it."""

    PAD_X, PAD_Y, GAP, HEADER_GAP, ACCENT = 8, 6, 2, 6, 3

    def _fonts(self, option: QStyleOptionViewItem) -> tuple[QFont, QFont, QFont]:
        title = QFont(option.font)
        sub = QFont(title)
        if sub.pointSizeF() > 0:
            sub.setPointSizeF(sub.pointSizeF() * 0.88)
        header = QFont(sub)
        header.setBold(True)
        return title, sub, header

    def header_height(self, option: QStyleOptionViewItem, index: Index) -> int:
        """Pixels at the top of the row taken by its group header (0 when none)."""
        if not index.data(HeaderRole):
            return 0
        _, _, header = self._fonts(option)
        return QFontMetrics(header).height() + 2 * self.HEADER_GAP

    def sizeHint(self, option: QStyleOptionViewItem, index: Index) -> QSize:
        title, sub, _ = self._fonts(option)
        height = QFontMetrics(title).height() + QFontMetrics(sub).height()
        return QSize(100, height + 2 * self.PAD_Y + self.GAP + self.header_height(option, index))

    def paint(self, painter: QPainter, option: QStyleOptionViewItem, index: Index) -> None:
        opt = QStyleOptionViewItem(option)
        self.initStyleOption(opt, index)
        opt.text = ""
        palette: QPalette = opt.palette
        title_font, sub_font, header_font = self._fonts(opt)
        muted_color = palette.color(QPalette.ColorRole.PlaceholderText)
        top = self.header_height(opt, index)
        painter.save()
        if top:
            painter.setFont(header_font)
            painter.setPen(muted_color)
            metrics = QFontMetrics(header_font)
            painter.drawText(
                opt.rect.x() + self.PAD_X,
                opt.rect.y() + self.HEADER_GAP + metrics.ascent(),
                str(index.data(HeaderRole)),
            )
        painter.restore()
        # The item (selection, hover) is only the part below the header.
        opt.rect = opt.rect.adjusted(0, top, 0, 0)
        current = bool(index.data(CurrentRole))
        widget = opt.widget
        style = widget.style() if widget is not None else QApplication.style()
        style.drawControl(QStyle.ControlElement.CE_ItemViewItem, opt, painter, widget)
        selected = bool(opt.state & QStyle.StateFlag.State_Selected)
        painter.save()
        if current:
            accent = palette.color(QPalette.ColorRole.Highlight)
            if not selected:
                tint = QColor(accent)
                tint.setAlpha(40)
                painter.fillRect(opt.rect, tint)
            painter.fillRect(
                QRect(opt.rect.x(), opt.rect.y(), self.ACCENT, opt.rect.height()), accent
            )
            title_font.setBold(True)
        if opt.state & QStyle.StateFlag.State_HasFocus and widget is not None and widget.hasFocus():
            # the keyboard's row is seen (the style's focus frame is faint or absent)
            ring = QColor(palette.color(QPalette.ColorRole.Highlight))
            painter.setPen(ring)
            painter.setBrush(Qt.BrushStyle.NoBrush)
            painter.drawRect(opt.rect.adjusted(0, 0, -1, -1))
        rect = opt.rect.adjusted(self.PAD_X, self.PAD_Y, -self.PAD_X, -self.PAD_Y)
        text_color = palette.color(
            QPalette.ColorRole.HighlightedText if selected else QPalette.ColorRole.Text
        )
        muted = text_color if selected else muted_color
        title_metrics = QFontMetrics(title_font)
        sub_metrics = QFontMetrics(sub_font)
        right = rect.right()
        if index.data(PinnedRole):
            side = title_metrics.height()
            paint_pin(painter, QRect(right - side + 1, rect.y(), side, side), muted)
            right -= side + 4
        detail = str(index.data(DetailRole) or "")
        if detail:
            painter.setFont(sub_font)
            painter.setPen(muted)
            width = sub_metrics.horizontalAdvance(detail)
            painter.drawText(right - width, rect.y() + title_metrics.ascent(), detail)
            right -= width + 6
        painter.setFont(title_font)
        painter.setPen(text_color)
        title = str(index.data(Qt.ItemDataRole.EditRole) or "")
        painter.drawText(
            rect.x(),
            rect.y() + title_metrics.ascent(),
            elide_title(title, title_metrics, right - rect.x()),
        )
        painter.setPen(muted)
        baseline = rect.y() + title_metrics.height() + self.GAP + sub_metrics.ascent()
        self._paint_snippet(painter, str(index.data(SubtitleRole) or ""), sub_font, rect, baseline)
        painter.restore()

    @staticmethod
    def _paint_snippet(
        painter: QPainter, text: str, font: QFont, rect: QRect, baseline: int
    ) -> None:
        """The subtitle; in a search snippet the matches (between SEARCH_MARKS) are bold
        and the marks themselves are not shown."""
        bold = QFont(font)
        bold.setBold(True)
        x, right = rect.x(), rect.right()
        for n, part in enumerate(split_marks(text)):
            if not part:
                continue
            current = bold if n % 2 else font
            metrics = QFontMetrics(current)
            painter.setFont(current)
            width = metrics.horizontalAdvance(part)
            if x + width > right:  # the last part that fits, cut with an ellipsis
                painter.drawText(
                    x, baseline, metrics.elidedText(part, Qt.TextElideMode.ElideRight, right - x)
                )
                return
            painter.drawText(x, baseline, part)
            x += width

    def updateEditorGeometry(
        self, editor: QWidget, option: QStyleOptionViewItem, index: Index
    ) -> None:
        # The rename editor covers the title line, not the group header above it.
        top = self.header_height(option, index)
        title, _, _ = self._fonts(option)
        rect = option.rect.adjusted(0, top, 0, 0)
        height = QFontMetrics(title).height() + 2 * self.PAD_Y
        editor.setGeometry(QRect(rect.x(), rect.y(), rect.width(), height))
