"""The streaming tab's figures (speed, tokens) change without laying out and repainting
the whole tab (issue 20 item 3): a status label's text change stops at its IsolatedLabel,
which passes a layout request on only when the label needs another size."""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QEvent, QObject
from PySide6.QtWidgets import QApplication

from app.ui.status_text import IsolatedLabel


class EventCount(QObject):
    """Counts the events of ``kinds`` that reach the watched objects."""

    def __init__(self, kinds: tuple[QEvent.Type, ...]) -> None:
        super().__init__()
        self.kinds = kinds
        self.counts: dict[tuple[QObject, QEvent.Type], int] = {}

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if event.type() in self.kinds:
            key = (watched, event.type())
            self.counts[key] = self.counts.get(key, 0) + 1
        return False

    def of(self, watched: QObject, kind: QEvent.Type) -> int:
        return self.counts.get((watched, kind), 0)


def settle(qtbot: Any) -> None:
    for _ in range(3):
        QApplication.processEvents()
        qtbot.wait(20)


def test_a_figure_change_repaints_the_status_row_not_the_tab(qtbot: Any, make_window: Any) -> None:
    window, _ = make_window()
    tab = window.new_tab()
    settle(qtbot)
    assert isinstance(tab.state_label.parentWidget(), IsolatedLabel)
    assert isinstance(tab.meter_label.parentWidget(), IsolatedLabel)
    tab.state_label.setText("generating at 12.3 tok/s")
    tab.meter_label.setText("1,000 / 2,048 tokens")
    settle(qtbot)

    count = EventCount((QEvent.Type.LayoutRequest, QEvent.Type.Paint))
    watched = (window.tab_widget, tab.composer, tab.view.viewport(), tab.state_label)
    for w in watched:
        w.installEventFilter(count)
    # what a streaming tab's update does a few times a second: same-width figures
    for i in range(5):
        tab.state_label.setText(f"generating at {40 + i}.5 tok/s")
        tab.meter_label.setText(f"1,{i}00 / 2,048 tokens")
        settle(qtbot)
    for w in watched:
        w.removeEventFilter(count)

    assert tab.state_label.text() == "generating at 44.5 tok/s"
    assert count.of(tab.state_label, QEvent.Type.Paint) >= 1  # the new text is painted
    # ... and nothing else: no layout request reached the tab widget (it repaints the
    # whole tab for one), the composer and the chat were not painted
    assert count.of(window.tab_widget, QEvent.Type.LayoutRequest) == 0
    assert count.of(tab.composer, QEvent.Type.Paint) == 0
    assert count.of(tab.view.viewport(), QEvent.Type.Paint) == 0


def test_a_longer_figure_still_gets_its_room(qtbot: Any, make_window: Any) -> None:
    window, _ = make_window()
    tab = window.new_tab()
    tab.meter_label.setText("1 / 2,048 tokens")
    settle(qtbot)
    holder = tab.meter_label.parentWidget()
    assert isinstance(holder, IsolatedLabel)
    before, passed = holder.width(), holder.layout_requests
    tab.meter_label.setText("1,234 / 2,048 tokens · 512 kept for the reply")
    settle(qtbot)
    assert holder.layout_requests == passed + 1
    assert holder.width() > before
    assert tab.meter_label.width() == holder.width()
    assert tab.meter_label.width() >= tab.meter_label.sizeHint().width()
