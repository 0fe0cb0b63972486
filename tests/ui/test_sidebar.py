"""The sidebar on a real SQLite file, offscreen: date groups (with a fixed "now"), the
current chat highlighted, empty chats hidden, a drawn pin icon, Delete and multi-selection,
search off the GUI thread (one row per chat, the message it jumps to, stale results
dropped, typing debounced)."""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from PySide6.QtCore import QPoint, Qt
from PySide6.QtGui import QPalette
from pytestqt.qtbot import QtBot

from app.storage import Database
from app.storage.export import FORMAT, FORMAT_VERSION, import_json
from app.ui.sidebar import (
    PINNED,
    PREVIOUS_7,
    PREVIOUS_30,
    TODAY,
    YESTERDAY,
    CurrentRole,
    Sidebar,
    date_group,
    split_marks,
)

# A fixed local "now": the groups depend on calendar days, not on when the test runs.
NOW = dt.datetime(2026, 3, 15, 12, 0).timestamp()


def at(days_ago: float, hour: int = 9) -> float:
    day = dt.datetime(2026, 3, 15, hour, 0) - dt.timedelta(days=days_ago)
    return day.timestamp()


def conversation(title: str, when: float, *texts: str, pinned: bool = False) -> dict[str, Any]:
    return {
        "title": title,
        "title_source": "user",
        "created_at": when,
        "updated_at": when,
        "pinned": pinned,
        "messages": [
            {
                "id": n,
                "parent": n - 1 if n > 1 else None,
                "role": "user" if n % 2 else "assistant",
                "content": text,
                "created_at": when,
            }
            for n, text in enumerate(texts or ("hello",), start=1)
        ],
    }


def add(db: Database, *conversations: dict[str, Any]) -> list[int]:
    """Conversations at chosen times, through the public import (timestamps kept)."""
    data = {"format": FORMAT, "version": FORMAT_VERSION, "conversations": list(conversations)}
    return import_json(db, data)


@pytest.fixture
def sidebar(qtbot: QtBot, db: Database) -> Iterator[Sidebar]:
    widget = Sidebar(db, now=lambda: NOW)
    qtbot.addWidget(widget)
    widget.resize(300, 700)
    widget.show()
    yield widget
    widget.stop_refreshing()
    assert widget.wait_search()


def ids(sidebar: Sidebar) -> list[int]:
    return [r.conversation_id for r in sidebar.model.rows]


def test_date_group_boundaries() -> None:
    assert date_group(at(0, hour=0), NOW) == TODAY
    assert date_group(at(-1), NOW) == TODAY  # a clock set back: not lost
    assert date_group(at(1, hour=23), NOW) == YESTERDAY
    assert date_group(at(2), NOW) == PREVIOUS_7
    assert date_group(at(6), NOW) == PREVIOUS_7
    assert date_group(at(7), NOW) == PREVIOUS_30
    assert date_group(at(29), NOW) == PREVIOUS_30
    assert date_group(at(30), NOW) == "February 2026"
    assert date_group(at(80), NOW) == "December 2025"


def test_snippet_marks_split_into_plain_and_bold_parts() -> None:
    assert split_marks("no match") == ["no match"]
    assert split_marks("a «b» c «d»") == ["a ", "b", " c ", "d", ""]
    assert split_marks("«x» and an unclosed «y") == ["", "x", " and an unclosed «y"]


def test_rows_are_grouped_by_date_and_headers_are_not_selectable(
    qtbot: QtBot, db: Database, sidebar: Sidebar
) -> None:
    made = add(
        db,
        conversation("old pinned", at(200), pinned=True),
        conversation("this morning", at(0, hour=8)),
        conversation("just now", at(0, hour=11)),
        conversation("yesterday", at(1)),
        conversation("three days", at(3)),
        conversation("ten days", at(10)),
        conversation("january", at(45)),
        conversation("december", at(80)),
    )
    sidebar.refresh()
    rows = sidebar.model.rows
    assert [r.title for r in rows] == [
        "old pinned",
        "just now",
        "this morning",
        "yesterday",
        "three days",
        "ten days",
        "january",
        "december",
    ]
    assert [r.header for r in rows] == [
        PINNED,
        TODAY,
        None,  # the second of today's has no header of its own
        YESTERDAY,
        PREVIOUS_7,
        PREVIOUS_30,
        "January 2026",
        "December 2025",
    ]
    assert rows[0].pinned and "📌" not in rows[0].title
    # A header is drawn above its row: a click on it selects and opens nothing...
    opened: list[int] = []
    sidebar.openRequested.connect(opened.append)
    view = sidebar.view
    first = view.visualRect(sidebar.model.index(1, 0))
    qtbot.mouseClick(
        view.viewport(), Qt.MouseButton.LeftButton, pos=first.topLeft() + QPoint(20, 3)
    )
    assert opened == [] and sidebar.selected_ids() == []
    # ...a click on the row below it opens that chat.
    qtbot.mouseClick(
        view.viewport(), Qt.MouseButton.LeftButton, pos=first.bottomLeft() + QPoint(20, -8)
    )
    assert opened == [made[2]]
    assert sidebar.selected_ids() == [made[2]]
    # A row with a header is taller by the header: the rows under it are not squeezed.
    assert first.height() > view.visualRect(sidebar.model.index(2, 0)).height()


def test_pin_icon_is_drawn(qtbot: QtBot, db: Database, sidebar: Sidebar) -> None:
    add(db, conversation("pinned", at(0), pinned=True), conversation("plain", at(0, hour=8)))
    sidebar.refresh()
    view = sidebar.view
    image = view.viewport().grab().toImage()
    background = view.palette().color(QPalette.ColorRole.Base)

    def inked(row: int) -> int:
        """Non-background pixels in the title line's last 24 px (where the pin goes)."""
        rect = view.visualRect(sidebar.model.index(row, 0))
        top = rect.bottom() - view.fontMetrics().height() * 2 - 6
        return sum(
            image.pixelColor(x, y) != background
            for x in range(rect.right() - 24, rect.right() - 4)
            for y in range(top, top + view.fontMetrics().height())
        )

    assert inked(0) > 15  # the pin
    assert inked(1) == 0  # an unpinned row has nothing there


def test_current_chat_highlighted_and_empty_chats_hidden(
    qtbot: QtBot, db: Database, sidebar: Sidebar
) -> None:
    a, b = add(db, conversation("a", at(0, hour=10)), conversation("b", at(0, hour=9)))
    empty = db.create_conversation()  # what the window's "New chat" makes
    sidebar.refresh()
    assert ids(sidebar) == [a, b]  # the empty one is not listed
    sidebar.set_current(empty.id)  # ...unless it is the chat being written
    assert empty.id in ids(sidebar)
    row = sidebar.model.row_of(empty.id)
    assert row is not None and sidebar.model.index(row, 0).data(CurrentRole)
    assert sidebar.selected_ids() == [empty.id]
    sidebar.set_current(b)  # switched away: the empty chat leaves the list
    assert ids(sidebar) == [a, b]
    index_b = sidebar.model.index(1, 0)
    assert index_b.data(CurrentRole) and not sidebar.model.index(0, 0).data(CurrentRole)
    assert sidebar.selected_ids() == [b]
    # The highlight is painted: an accent bar at the row's left edge, in the palette's
    # highlight colour, also when the selection moves elsewhere.
    sidebar.view.clearSelection()
    sidebar.view.setFocus()
    image = sidebar.view.viewport().grab().toImage()
    rect = sidebar.view.visualRect(index_b)
    accent = sidebar.view.palette().color(QPalette.ColorRole.Highlight)
    assert image.pixelColor(1, rect.bottom() - 4) == accent
    assert image.pixelColor(1, sidebar.view.visualRect(sidebar.model.index(0, 0)).bottom() - 4) != (
        accent
    )
    sidebar.set_current(None)
    assert not any(sidebar.model.index(n, 0).data(CurrentRole) for n in range(2))


def test_delete_key_and_multi_selection(qtbot: QtBot, db: Database, sidebar: Sidebar) -> None:
    made = add(db, *[conversation(f"chat {n}", at(0, hour=10 - n)) for n in range(4)])
    sidebar.refresh()
    assert ids(sidebar) == made
    opened: list[int] = []
    deleted: list[int] = []
    sidebar.openRequested.connect(opened.append)

    def delete(cid: int) -> None:  # as the window does: delete, then refresh
        deleted.append(cid)
        db.delete_conversation(cid)
        sidebar.refresh()

    sidebar.deleteRequested.connect(delete)
    view = sidebar.view

    def click(row: int, modifier: Qt.KeyboardModifier = Qt.KeyboardModifier.NoModifier) -> None:
        rect = view.visualRect(sidebar.model.index(row, 0))
        qtbot.mouseClick(view.viewport(), Qt.MouseButton.LeftButton, modifier, rect.center())

    click(0)
    click(2, Qt.KeyboardModifier.ControlModifier)
    assert sidebar.selected_ids() == [made[0], made[2]]
    click(3, Qt.KeyboardModifier.ShiftModifier)
    assert sidebar.selected_ids() == [made[0], made[2], made[3]]
    assert opened == [made[0]]  # Ctrl/Shift clicks select, they do not open
    view.setFocus()
    qtbot.keyClick(view, Qt.Key.Key_Delete)
    assert deleted == [made[0], made[2], made[3]]
    assert ids(sidebar) == [made[1]]
    # F2 still renames rather than deleting; Delete during a rename edits the text.
    click(0)
    qtbot.keyClick(view, Qt.Key.Key_F2)
    qtbot.keyClick(view.focusWidget(), Qt.Key.Key_Delete)
    assert deleted == [made[0], made[2], made[3]]


def test_search_one_row_per_chat_jumping_to_the_best_match(
    qtbot: QtBot, db: Database, sidebar: Sidebar
) -> None:
    long = "a story about mountains, valleys and one alpaca " + "filler words " * 40
    a, b, gone = add(
        db,
        conversation("chat a", at(0), long, "alpaca", long),
        conversation("chat b", at(1), "my alpaca sings"),
        conversation("deleted", at(0), "alpaca"),
    )
    db.delete_conversation(gone)
    best = next(m.id for m in db.messages(a) if m.content == "alpaca")
    sidebar.refresh()
    with qtbot.waitSignal(sidebar.searchFinished, timeout=5000):
        sidebar.search.setText("alpaca")  # debounced: no refresh() call needed
    rows = sidebar.model.rows
    assert sorted(ids(sidebar)) == sorted([a, b])  # one row per chat, not per message
    row_a = rows[ids(sidebar).index(a)]
    assert row_a.message_id == best and row_a.detail == "3 matches"
    assert "«alpaca»" in row_a.subtitle
    assert all(r.header is None for r in rows)
    opened: list[int] = []
    matched: list[tuple[int, int]] = []
    sidebar.openRequested.connect(opened.append)
    sidebar.matchOpened.connect(lambda cid, mid: matched.append((cid, mid)))
    rect = sidebar.view.visualRect(sidebar.model.index(ids(sidebar).index(a), 0))
    qtbot.mouseClick(sidebar.view.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())
    assert opened[-1] == a and matched[-1] == (a, best)
    with qtbot.waitSignal(sidebar.searchFinished, timeout=5000):
        sidebar.search.setText("nowhere to be found")
    assert sidebar.model.rows == [] and sidebar.empty.text() == "Nothing found."
    sidebar.search.clear()
    sidebar.refresh()  # the plain list comes at once
    assert ids(sidebar) == [a, b] and not sidebar.model.searching


def test_stale_search_results_are_dropped(qtbot: QtBot, db: Database, sidebar: Sidebar) -> None:
    (a,) = add(db, conversation("chat a", at(0), "alpaca"))
    sidebar.refresh()
    finished: list[None] = []
    sidebar.searchFinished.connect(lambda: finished.append(None))
    # A search that ran, whose result is still on its way, when the field is cleared:
    sidebar.search.setText("alpaca")
    sidebar.refresh()
    assert sidebar.wait_search()  # done on its thread; the result waits in the queue
    sidebar.search.clear()
    sidebar.refresh()
    qtbot.wait(50)  # deliver the queued result
    assert finished == [] and not sidebar.model.searching and ids(sidebar) == [a]
    # A search still queued behind another is not run at all once it is superseded.
    gate = threading.Event()

    def hold() -> None:  # keeps the background thread busy until the gate opens
        gate.wait()

    sidebar._jobs.submit(hold)
    sidebar.search.setText("alpaca")
    sidebar.refresh()
    sidebar.search.setText("zebra")
    sidebar.refresh()
    gate.set()
    qtbot.waitUntil(lambda: len(finished) == 1, timeout=5000)
    qtbot.wait(50)
    assert len(finished) == 1 and sidebar.model.rows == []  # only "zebra"'s (no) results


def test_typing_is_debounced(qtbot: QtBot, db: Database, sidebar: Sidebar) -> None:
    add(db, conversation("chat a", at(0), "alpaca"))
    sidebar.refresh()
    finished: list[None] = []
    sidebar.searchFinished.connect(lambda: finished.append(None))
    with qtbot.waitSignal(sidebar.searchFinished, timeout=5000):
        qtbot.keyClicks(sidebar.search, "alpac")
    qtbot.wait(300)
    assert len(finished) == 1 and len(sidebar.model.rows) == 1


def test_pin_from_the_context_menu_has_an_icon(
    qtbot: QtBot, db: Database, sidebar: Sidebar
) -> None:
    (a,) = add(db, conversation("chat a", at(0)))
    sidebar.refresh()
    pins: list[tuple[int, bool]] = []
    sidebar.pinRequested.connect(lambda cid, on: pins.append((cid, on)))
    rect = sidebar.view.visualRect(sidebar.model.index(0, 0))
    menu = sidebar.context_menu(rect.center())
    actions = {a.text(): a for a in menu.actions()}
    assert not actions["Pin"].icon().isNull()
    actions["Pin"].trigger()
    assert pins == [(a, True)]


def test_down_from_the_search_box_reaches_the_results(
    qtbot: QtBot, db: Database, sidebar: Sidebar
) -> None:
    add(db, conversation("first", at(0, hour=11)), conversation("second", at(1)))
    sidebar.refresh()
    sidebar.window().activateWindow()
    sidebar.search.setFocus()
    qtbot.waitUntil(sidebar.search.hasFocus, timeout=3000)
    qtbot.keyClick(sidebar.search, Qt.Key.Key_Down)
    qtbot.waitUntil(sidebar.view.hasFocus, timeout=3000)
    current = sidebar.view.currentIndex()
    assert current.isValid() and current.row() == 0
    assert sidebar.model.rows[0].title == "first"
    # the row the keyboard stands on is drawn with a ring in the highlight colour (seen
    # without its selection, whose fill is that colour too)
    sidebar.view.selectionModel().clearSelection()
    assert sidebar.view.currentIndex() == current
    image = sidebar.view.viewport().grab().toImage()
    rect = sidebar.view.visualRect(current)
    accent = sidebar.view.palette().color(QPalette.ColorRole.Highlight)
    y = rect.bottom()  # the ring's bottom edge (the header is drawn above the row)
    edge = [image.pixelColor(x, y) for x in range(rect.left() + 20, rect.right() - 20)]
    assert sum(1 for c in edge if c == accent) > len(edge) // 2
