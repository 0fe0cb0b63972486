"""Export and import from the window's sidebar, on a real SQLite file and real files,
offscreen: the work runs in the background and reports a sentence; imported chats are
listed at once; a malformed file imports nothing; the Qt file dialogs (non-native) are
driven without blocking; the context menu offers export for the selection."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from PySide6.QtWidgets import QFileDialog
from pytestqt.qtbot import QtBot

from app.storage import Database
from app.storage.export import FORMAT, ExportFormat
from app.ui.export_import import TransferOutcome
from app.ui.sidebar import Sidebar

TIMEOUT_MS = 10_000


@pytest.fixture
def sidebar(qtbot: QtBot, db: Database) -> Iterator[Sidebar]:
    widget = Sidebar(db)
    widget.transfers.native_dialogs = False
    qtbot.addWidget(widget)
    widget.resize(320, 600)
    widget.show()
    yield widget
    assert widget.transfers.wait_idle()
    widget.stop_refreshing()
    assert widget.wait_search()


def chat(db: Database, title: str, *texts: str) -> int:
    c = db.create_conversation(title)
    for n, text in enumerate(texts):
        db.append_message(c.id, "user" if n % 2 == 0 else "assistant", text)
    return c.id


def outcome_of(qtbot: QtBot, sidebar: Sidebar, start: object) -> TransferOutcome:
    """Run ``start()`` and wait for the transfer's result on the GUI thread."""
    with qtbot.waitSignal(sidebar.transfers.finished, timeout=TIMEOUT_MS) as blocker:
        assert callable(start)
        start()
    result = blocker.args[0]
    assert isinstance(result, TransferOutcome)
    return result


def test_json_bundle_round_trip_lists_imported_chats_at_once(
    qtbot: QtBot, db: Database, sidebar: Sidebar, tmp_path: Path
) -> None:
    a = chat(db, "Llamas", "What is a llama?", "A camelid.")
    b = chat(db, "Alpacas", "And an alpaca?")
    path = tmp_path / "two.json"
    out = outcome_of(
        qtbot, sidebar, lambda: sidebar.transfers.export_file([a, b], ExportFormat.JSON, path)
    )
    assert not out.error and out.written == (path,)
    assert out.message == f"Exported 2 conversations as JSON to {path}."
    data = json.loads(path.read_text(encoding="utf-8"))
    assert data["format"] == FORMAT
    assert [c["title"] for c in data["conversations"]] == ["Llamas", "Alpacas"]
    sidebar.refresh()
    before = [r.conversation_id for r in sidebar.model.rows]
    out = outcome_of(qtbot, sidebar, lambda: sidebar.transfers.import_paths([path]))
    assert not out.error and len(out.imported) == 2
    assert out.message == "Imported 2 conversations from two.json."
    # In the list at once, without a search or a restart; the notice says what happened.
    listed = [r.conversation_id for r in sidebar.model.rows]
    assert set(listed) == set(before) | set(out.imported)
    assert sidebar.notice.isVisible() and sidebar.notice.text() == out.message
    copied = db.get_thread(out.imported[0])
    assert [m.content for m in copied] == ["What is a llama?", "A camelid."]


def test_markdown_selection_goes_one_file_each_into_a_folder_replacing_nothing(
    qtbot: QtBot, db: Database, sidebar: Sidebar, tmp_path: Path
) -> None:
    first = chat(db, "Same: title?", "one")
    second = chat(db, "Same: title?", "two")
    folder = tmp_path / "out"
    folder.mkdir()
    (folder / "Same title.md").write_text("keep me", encoding="utf-8")
    out = outcome_of(
        qtbot,
        sidebar,
        lambda: sidebar.transfers.export_folder([first, second], ExportFormat.MARKDOWN, folder),
    )
    assert not out.error
    assert [p.name for p in out.written] == ["Same title (2).md", "Same title (3).md"]
    assert (folder / "Same title.md").read_text(encoding="utf-8") == "keep me"
    assert "one" in out.written[0].read_text(encoding="utf-8")
    assert "two" in out.written[1].read_text(encoding="utf-8")
    # A folder that vanished: a sentence, nothing written.
    out = outcome_of(
        qtbot,
        sidebar,
        lambda: sidebar.transfers.export_folder([first], ExportFormat.MARKDOWN, folder / "gone"),
    )
    assert out.error and "There is no folder" in out.message


def test_a_malformed_file_imports_nothing_and_says_which(
    qtbot: QtBot, db: Database, sidebar: Sidebar, tmp_path: Path
) -> None:
    a = chat(db, "Llamas", "hello")
    good = tmp_path / "good.json"
    outcome_of(qtbot, sidebar, lambda: sidebar.transfers.export_file([a], ExportFormat.JSON, good))
    bad = tmp_path / "bad.json"
    data = json.loads(good.read_text(encoding="utf-8"))
    data["conversations"][0]["messages"][0]["role"] = "wizard"
    bad.write_text(json.dumps(data), encoding="utf-8")
    broken = tmp_path / "broken.json"
    broken.write_text('{"format": "llamadesk-conv', encoding="utf-8")
    count = len(db.list_conversations())
    for files, name in (([good, bad], "bad.json"), ([broken], "broken.json")):
        out = outcome_of(qtbot, sidebar, lambda files=files: sidebar.transfers.import_paths(files))
        assert out.error and not out.imported
        assert name in out.message and "nothing was imported" in out.message
        assert len(db.list_conversations()) == count  # good.json was not imported either
        assert sidebar.notice.isVisible() and sidebar.notice.text() == out.message


def test_the_work_runs_off_the_gui_thread(
    qtbot: QtBot, db: Database, sidebar: Sidebar, tmp_path: Path
) -> None:
    a = chat(db, "Llamas", "hello")
    gate = threading.Event()

    def hold() -> None:  # keeps the background thread busy until the gate opens
        gate.wait()

    sidebar.transfers._jobs.submit(hold)
    path = tmp_path / "later.md"
    sidebar.transfers.export_file([a], ExportFormat.MARKDOWN, path)  # returns at once
    assert not path.exists()
    gate.set()
    qtbot.waitUntil(path.exists, timeout=TIMEOUT_MS)
    assert sidebar.transfers.wait_idle()
    assert path.read_text(encoding="utf-8").startswith("# Llamas")


def test_export_and_import_through_the_file_dialogs(
    qtbot: QtBot, db: Database, sidebar: Sidebar, tmp_path: Path
) -> None:
    a = chat(db, "Dialog chat", "hello")
    transfers = sidebar.transfers
    transfers.export([a], ExportFormat.JSON)
    dialog = transfers.dialog
    assert isinstance(dialog, QFileDialog) and dialog.isVisible()
    assert dialog.acceptMode() == QFileDialog.AcceptMode.AcceptSave
    assert dialog.selectedFiles()[0].endswith("Dialog chat.json")  # named after the chat
    target = tmp_path / "chosen.json"
    dialog.selectFile(str(target))
    with qtbot.waitSignal(transfers.finished, timeout=TIMEOUT_MS) as blocker:
        dialog.accept()
    assert blocker.args[0].written == (target,) and target.is_file()
    assert transfers.dialog is None
    # Import: the dialog starts where the last one ended.
    transfers.import_dialog()
    dialog = transfers.dialog
    assert isinstance(dialog, QFileDialog)
    assert Path(dialog.directory().absolutePath()) == tmp_path
    dialog.selectFile(str(target))
    with qtbot.waitSignal(transfers.finished, timeout=TIMEOUT_MS) as blocker:
        dialog.accept()
    (new,) = blocker.args[0].imported
    assert db.get_conversation(new).title == "Dialog chat"
    assert new in [r.conversation_id for r in sidebar.model.rows]
    # Several chats as Markdown: a folder dialog.
    b = chat(db, "Another", "hi")
    transfers.export([a, b], ExportFormat.MARKDOWN)
    dialog = transfers.dialog
    assert isinstance(dialog, QFileDialog)
    assert dialog.fileMode() == QFileDialog.FileMode.Directory
    dialog.reject()
    assert transfers.dialog is None


def test_context_menu_exports_the_selection_and_all(
    qtbot: QtBot, db: Database, sidebar: Sidebar
) -> None:
    a = chat(db, "First", "one")
    b = chat(db, "Second", "two")
    sidebar.refresh()
    sidebar.view.selectAll()
    rect = sidebar.view.visualRect(sidebar.model.index(0, 0))
    menu = sidebar.context_menu(rect.center())
    texts = [action.text() for action in menu.actions() if action.text()]
    assert texts == [
        "Export 2 conversations as Markdown…",
        "Export 2 conversations as JSON…",
        "Delete 2 conversations",
    ]
    next(x for x in menu.actions() if x.text().endswith("as JSON…")).trigger()
    dialog = sidebar.transfers.dialog
    assert isinstance(dialog, QFileDialog) and "2 conversations" in dialog.windowTitle()
    dialog.reject()
    # On the empty part of the list: import, and export of everything.
    below = sidebar.view.viewport().rect().bottomLeft()
    menu = sidebar.context_menu(below)
    texts = [action.text() for action in menu.actions() if action.text()]
    assert texts == [
        "New chat",
        "Import conversations…",
        "Export all as Markdown…",
        "Export all as JSON…",
    ]
    assert {a, b} == set(sidebar.selected_ids())


def test_nothing_to_export_and_read_only(qtbot: QtBot, home: Path, tmp_path: Path) -> None:
    Database.open().close()
    ro = Database.open(read_only=True)
    try:
        widget = Sidebar(ro)
        qtbot.addWidget(widget)
        out = outcome_of(
            qtbot, widget, lambda: widget.transfers.export(None, ExportFormat.MARKDOWN)
        )
        assert out.message == "There are no conversations to export."
        out = outcome_of(qtbot, widget, widget.transfers.import_dialog)
        assert out.error and "read-only" in out.message
        assert widget.transfers.dialog is None
        widget.stop_refreshing()
        assert widget.wait_search()
    finally:
        ro.close()
