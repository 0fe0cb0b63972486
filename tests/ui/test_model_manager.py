"""ModelManager: listing good and broken GGUF files, loading, progress, background scans."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QLabel,
    QProgressBar,
    QPushButton,
    QStackedWidget,
    QTableWidget,
    QTableWidgetItem,
)
from pytestqt.qtbot import QtBot

import app.ui.model_manager as model_manager
from app.engine.metadata import read_model_info
from app.storage import Database
from app.ui.model_manager import COLUMNS, ModelManager, ModelManagerDialog
from tests.support.broken_gguf import write_corpus
from tests.support.gguf_models import TinySpec, write_tiny_model

pytestmark = pytest.mark.qt_log_ignore(r"This plugin does not support propagateSizeHints")

SCAN_TIMEOUT_MS = 15_000


@pytest.fixture
def db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Database]:
    monkeypatch.setenv("LLAMADESK_HOME", str(tmp_path / "home"))
    database = Database.open()
    yield database
    database.close()


class CountingReader:
    """Wraps the real reader; counts calls (from the scan thread)."""

    def __init__(self) -> None:
        self.paths: list[str] = []
        self.threads: set[int] = set()
        self._lock = threading.Lock()

    def __call__(self, path: Path) -> Mapping[str, Any]:
        with self._lock:
            self.paths.append(str(path))
            self.threads.add(threading.get_ident())
        return read_model_info(path).to_dict()


@pytest.fixture
def reader(monkeypatch: pytest.MonkeyPatch) -> CountingReader:
    counting = CountingReader()
    monkeypatch.setattr(model_manager, "read_metadata", counting)
    return counting


def make_manager(qtbot: QtBot, db: Database) -> ModelManager:
    manager = ModelManager(db)
    qtbot.addWidget(manager)
    manager.resize(1000, 600)
    manager.show()
    qtbot.waitUntil(lambda: not manager.is_scanning(), timeout=SCAN_TIMEOUT_MS)
    return manager


def table(manager: ModelManager) -> QTableWidget:
    widget = manager.findChild(QTableWidget, "modelTable")
    assert widget is not None
    return widget


def item(t: QTableWidget, row: int, col: int) -> QTableWidgetItem:
    cell = t.item(row, col)
    assert cell is not None, f"no cell at {row}, {col}"
    return cell


def rows(manager: ModelManager) -> dict[str, list[str]]:
    """File name -> the row's cell texts."""
    t = table(manager)
    out: dict[str, list[str]] = {}
    for row in range(t.rowCount()):
        path = item(t, row, 0).data(Qt.ItemDataRole.UserRole)
        out[Path(path).name] = [
            (cell.text() if (cell := t.item(row, col)) else "") for col in range(t.columnCount())
        ]
    return out


def row_of(manager: ModelManager, name: str) -> int:
    t = table(manager)
    for row in range(t.rowCount()):
        if Path(item(t, row, 0).data(Qt.ItemDataRole.UserRole)).name == name:
            return row
    raise AssertionError(f"{name} is not listed")


def double_click(qtbot: QtBot, manager: ModelManager, row: int) -> None:
    t = table(manager)
    rect = t.visualItemRect(item(t, row, 2))
    qtbot.mouseClick(t.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())
    qtbot.mouseDClick(t.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())


def button(manager: ModelManager, name: str) -> QPushButton:
    widget = manager.findChild(QPushButton, name)
    assert widget is not None
    return widget


def label(manager: ModelManager, name: str) -> QLabel:
    widget = manager.findChild(QLabel, name)
    assert widget is not None
    return widget


@pytest.fixture
def library(tmp_path: Path) -> Path:
    folder = tmp_path / "models"
    folder.mkdir()
    write_tiny_model(folder / "alpha.gguf", TinySpec(name="Alpha Tiny"))
    write_tiny_model(
        folder / "beta.gguf", TinySpec(name="Beta Tiny", chat_template=None, n_ctx_train=4096)
    )
    (folder / "broken.gguf").write_bytes(b"")
    return folder


def test_folder_lists_good_and_broken_files(
    qtbot: QtBot, db: Database, library: Path, reader: CountingReader
) -> None:
    db.add_folder(library)
    manager = make_manager(qtbot, db)
    listed = rows(manager)
    assert set(listed) == {"alpha.gguf", "beta.gguf", "broken.gguf"}
    header = [
        h.text() if (h := table(manager).horizontalHeaderItem(c)) else ""
        for c in range(len(COLUMNS))
    ]
    assert header[:3] == ["Name", "Architecture", "Parameters"]
    alpha = listed["alpha.gguf"]
    assert alpha[0] == "Alpha Tiny" and alpha[1] == "llama"
    assert alpha[3] == "F32" and alpha[5] == "2,048" and alpha[6] == "Yes"
    assert alpha[7] == "Never"
    # The fit verdict before loading: a tiny model fits any machine these tests run on.
    fit_col = COLUMNS.index("Fit")
    assert alpha[fit_col] == "Fits"
    fit_item = item(table(manager), row_of(manager, "alpha.gguf"), fit_col)
    assert fit_item.toolTip().startswith("Fits: needs about")
    assert listed["beta.gguf"][6] == "No" and listed["beta.gguf"][5] == "4,096"
    broken = listed["broken.gguf"]
    assert "empty (0 bytes)" in broken[1] and broken[-1] == "Broken"
    # Headers were read on the scan thread, not on the GUI thread.
    assert len(reader.paths) == 3
    assert threading.get_ident() not in reader.threads

    # Good files load by double-click; the broken one cannot be loaded.
    with qtbot.waitSignal(manager.loadRequested, timeout=2000) as blocker:
        double_click(qtbot, manager, row_of(manager, "beta.gguf"))
    assert blocker.args == [str(library / "beta.gguf")]
    with qtbot.assertNotEmitted(manager.loadRequested):
        double_click(qtbot, manager, row_of(manager, "broken.gguf"))
    assert not button(manager, "loadButton").isEnabled()
    assert "cannot be loaded" in label(manager, "messageLabel").text()

    # The Load button loads the selection.
    table(manager).selectRow(row_of(manager, "alpha.gguf"))
    assert button(manager, "loadButton").isEnabled()
    with qtbot.waitSignal(manager.loadRequested, timeout=2000) as blocker:
        button(manager, "loadButton").click()
    assert blocker.args == [str(library / "alpha.gguf")]


def test_all_kinds_of_broken_files_are_listed_with_their_error(
    qtbot: QtBot, db: Database, tmp_path: Path, reader: CountingReader
) -> None:
    folder = tmp_path / "mixed"
    folder.mkdir()
    good = write_tiny_model(folder / "good.gguf")
    data = good.read_bytes()
    (folder / "truncated.gguf").write_bytes(data[: len(data) // 2])
    (folder / "random.gguf").write_bytes(os.urandom(4096))
    (folder / "notes.gguf").write_text("these are my notes, not a model\n")
    (folder / "empty.gguf").write_bytes(b"")
    (folder / "x.gguf").mkdir()  # a directory with a model's name is not a file
    (folder / "x.gguf" / "inner.gguf").write_bytes(b"GGUF")  # header only, then nothing
    (folder / "readme.txt").write_text("not listed: not a .gguf name")
    db.add_folder(folder)
    manager = make_manager(qtbot, db)
    listed = rows(manager)
    assert set(listed) == {
        "good.gguf",
        "truncated.gguf",
        "random.gguf",
        "notes.gguf",
        "empty.gguf",
        "inner.gguf",
    }
    assert listed["good.gguf"][-1] == ""
    assert "truncated" in listed["truncated.gguf"][1]
    assert "not a GGUF model file" in listed["random.gguf"][1]
    assert "not a GGUF model file" in listed["notes.gguf"][1]
    assert "empty" in listed["empty.gguf"][1]
    assert listed["inner.gguf"][1].startswith("Cannot be used: ")
    for name in ("truncated.gguf", "random.gguf", "notes.gguf", "empty.gguf", "inner.gguf"):
        assert listed[name][-1] == "Broken"


def test_files_llama_cpp_cannot_load_say_why(
    qtbot: QtBot, db: Database, tmp_path: Path, reader: CountingReader
) -> None:
    """Found from the header before any load: vocab only, unknown architecture, bad
    tensor shapes and data offsets are listed as broken, with the sentence."""
    folder = tmp_path / "unloadable"
    corpus = write_corpus(tmp_path / "corpus")
    expected = {
        "vocab_only": "holds only a vocabulary (no weights): it is a tokenizer file, not a model",
        "unknown_architecture": "uses the model architecture 'xllma'",
        "zero_dimension": "has a zero dimension",
        "huge_dimension": "has a huge dimension",
        "misaligned_offset": "not a multiple of the file's alignment (32)",
        "offset_past_end": "past the end of the file",
    }
    folder.mkdir()
    for name in expected:
        (folder / corpus[name].name).write_bytes(corpus[name].read_bytes())
    write_tiny_model(folder / "good.gguf")
    db.add_folder(folder)
    manager = make_manager(qtbot, db)
    listed = rows(manager)
    assert listed["good.gguf"][-1] == ""
    for name, message in expected.items():
        cells = listed[corpus[name].name]
        assert cells[1].startswith(f"Cannot be used: {corpus[name].name} "), cells
        assert message in cells[1] and cells[-1] == "Broken", cells
        table(manager).selectRow(row_of(manager, corpus[name].name))
        assert not button(manager, "loadButton").isEnabled()
        assert message in button(manager, "loadButton").toolTip()


def test_loading_progress_cancel_loaded_and_errors(
    qtbot: QtBot, db: Database, library: Path, reader: CountingReader
) -> None:
    db.add_folder(library)
    manager = make_manager(qtbot, db)
    alpha = str(library / "alpha.gguf")
    bar = manager.findChild(QProgressBar, "loadingBar")
    cancel = button(manager, "cancelLoadButton")
    assert bar is not None and not bar.isVisible() and not cancel.isVisible()

    manager.set_loading(alpha, 0.25)
    assert bar.isVisible() and cancel.isVisible()
    assert bar.value() == 250
    assert "alpha.gguf" in label(manager, "loadingLabel").text()
    assert rows(manager)["alpha.gguf"][-1] == "Loading…"
    assert not button(manager, "loadButton").isEnabled()
    manager.set_loading(alpha, 0.5)
    assert bar.value() == 500
    with qtbot.waitSignal(manager.cancelLoadRequested, timeout=1000):
        qtbot.mouseClick(cancel, Qt.MouseButton.LeftButton)
    manager.set_loading(None, 0.0)
    assert not bar.isVisible() and not cancel.isVisible()

    db.mark_used(alpha)  # as the main window does when a load succeeds
    manager.set_loaded(alpha)
    assert rows(manager)["alpha.gguf"][-1] == "● Loaded"
    assert rows(manager)["alpha.gguf"][7] == "Just now"
    assert "Alpha Tiny" in label(manager, "loadedLabel").text()
    assert button(manager, "unloadButton").isEnabled()
    with qtbot.waitSignal(manager.unloadRequested, timeout=1000):
        button(manager, "unloadButton").click()
    manager.set_loaded(None)
    assert rows(manager)["alpha.gguf"][-1] == ""
    assert not button(manager, "unloadButton").isEnabled()

    beta = str(library / "beta.gguf")
    manager.set_loading(beta, 0.9)
    manager.show_error(beta, "There is not enough memory to load this model.")
    assert not bar.isVisible()
    assert "not enough memory" in label(manager, "messageLabel").text()
    assert rows(manager)["beta.gguf"][-1] == "Failed to load"
    # A load error does not make the file unloadable: it may be retried.
    with qtbot.waitSignal(manager.loadRequested, timeout=2000):
        double_click(qtbot, manager, row_of(manager, "beta.gguf"))


def test_unchanged_rescan_reads_no_headers(
    qtbot: QtBot, db: Database, library: Path, reader: CountingReader
) -> None:
    db.add_folder(library)
    manager = make_manager(qtbot, db)
    assert len(reader.paths) == 3
    with qtbot.waitSignal(manager.scanFinished, timeout=SCAN_TIMEOUT_MS):
        button(manager, "rescanButton").click()
        assert label(manager, "scanLabel").isVisible()
        assert label(manager, "scanLabel").text().startswith("Scanning…")
    assert len(reader.paths) == 3
    assert not label(manager, "scanLabel").isVisible()
    assert len(rows(manager)) == 3

    # A new file is read, the others are not; a removed file disappears.
    write_tiny_model(library / "gamma.gguf", TinySpec(name="Gamma"))
    (library / "broken.gguf").unlink()
    with qtbot.waitSignal(manager.scanFinished, timeout=SCAN_TIMEOUT_MS):
        manager.refresh()
    assert [Path(p).name for p in reader.paths[3:]] == ["gamma.gguf"]
    assert set(rows(manager)) == {"alpha.gguf", "beta.gguf", "gamma.gguf"}


def test_empty_library_explains_how_to_get_a_model(
    qtbot: QtBot, db: Database, tmp_path: Path, reader: CountingReader
) -> None:
    manager = make_manager(qtbot, db)
    stack = manager.findChild(QStackedWidget)
    assert stack is not None
    empty = label(manager, "emptyLabel")
    assert stack.currentWidget() is empty
    text = empty.text()
    assert "GGUF" in text and "huggingface.co" in text
    assert "Add file" in text and "Add folder" in text

    # Adding a file (as the file dialog would) reads it in the background and lists it.
    path = write_tiny_model(tmp_path / "solo.gguf", TinySpec(name="Solo"))
    with qtbot.waitSignal(manager.scanFinished, timeout=SCAN_TIMEOUT_MS):
        manager._on_files_chosen([str(path)])
    assert stack.currentWidget() is table(manager)
    assert rows(manager)["solo.gguf"][0] == "Solo"
    assert reader.paths == [str(path)]

    # A file added one by one can be removed from the list again.
    table(manager).selectRow(0)
    remove = button(manager, "removeFileButton")
    assert remove.isEnabled()
    remove.click()
    assert stack.currentWidget() is empty


def test_add_and_remove_folder(
    qtbot: QtBot, db: Database, library: Path, reader: CountingReader
) -> None:
    manager = make_manager(qtbot, db)
    with qtbot.waitSignal(manager.scanFinished, timeout=SCAN_TIMEOUT_MS):
        manager._on_folder_chosen(str(library))
    assert len(rows(manager)) == 3
    assert db.list_folders() == [str(library)]
    folders = manager.findChild(model_manager.QListWidget, "folderList")
    assert folders is not None and folders.count() == 1
    folders.setCurrentRow(0)
    remove = button(manager, "removeFolderButton")
    assert remove.isEnabled()
    remove.click()
    assert db.list_folders() == []
    assert rows(manager) == {}
    # An empty folder: the explanation says no GGUF files were found there.
    empty_dir = library.parent / "nothing"
    empty_dir.mkdir()
    with qtbot.waitSignal(manager.scanFinished, timeout=SCAN_TIMEOUT_MS):
        manager._on_folder_chosen(str(empty_dir))
    assert "No GGUF files found" in label(manager, "emptyLabel").text()


def test_read_only_library_lists_but_does_not_change(
    qtbot: QtBot, db: Database, library: Path, reader: CountingReader
) -> None:
    db.add_folder(library)
    db.scan(reader)
    read_only = Database.open(db.path, read_only=True)
    try:
        manager = ModelManager(read_only)
        qtbot.addWidget(manager)
        assert not manager.is_scanning()
        assert len(rows(manager)) == 3
        assert not button(manager, "addFileButton").isEnabled()
        assert not button(manager, "rescanButton").isEnabled()
        manager.set_loaded(str(library / "alpha.gguf"))
        assert rows(manager)["alpha.gguf"][-1] == "● Loaded"
    finally:
        read_only.close()


def test_closing_during_a_scan_is_safe(
    qtbot: QtBot, db: Database, library: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    started = threading.Event()

    def slow_reader(path: Path) -> Mapping[str, Any]:
        started.set()
        time.sleep(0.2)
        return read_model_info(path).to_dict()

    monkeypatch.setattr(model_manager, "read_metadata", slow_reader)
    db.add_folder(library)
    manager = ModelManager(db)
    assert manager.is_scanning()
    assert started.wait(5)
    manager.deleteLater()  # the pool waits for the scan; late signals go nowhere
    qtbot.wait(50)
    # The scan went on with its own connection and cached what it read.
    qtbot.waitUntil(lambda: len(db.list_models()) == 3, timeout=SCAN_TIMEOUT_MS)


def test_two_quantizations_of_one_model_are_told_apart_by_file_name(
    qtbot: QtBot, db: Database, tmp_path: Path
) -> None:
    folder = tmp_path / "quants"
    folder.mkdir()
    for name in ("same-Q4_K_M.gguf", "same-Q8_0.gguf"):
        write_tiny_model(folder / name, TinySpec(name="Same Model"))
    db.add_folder(folder)
    manager = make_manager(qtbot, db)
    listed = rows(manager)
    file_col = COLUMNS.index("File")
    assert listed["same-Q4_K_M.gguf"][0] == "Same Model · same-Q4_K_M.gguf"
    assert listed["same-Q4_K_M.gguf"][file_col] == "same-Q4_K_M.gguf"
    assert listed["same-Q8_0.gguf"][file_col] == "same-Q8_0.gguf"
    manager.set_loaded(str(folder / "same-Q8_0.gguf"))
    assert rows(manager)["same-Q8_0.gguf"][-1] == "● Loaded"
    assert rows(manager)["same-Q4_K_M.gguf"][-1] == ""
    assert sorted(Path(p).name for p in manager.listed_paths()) == [
        "same-Q4_K_M.gguf",
        "same-Q8_0.gguf",
    ]


def test_add_files_and_the_file_dialog_starts_in_the_last_folder(
    qtbot: QtBot, db: Database, tmp_path: Path
) -> None:
    manager = make_manager(qtbot, db)
    first = model_manager.start_folder()
    assert first.is_dir()
    folder = tmp_path / "picked"
    folder.mkdir()
    path = write_tiny_model(folder / "picked.gguf", TinySpec(name="Picked"))
    model_manager.remember_folder(folder)
    assert model_manager.start_folder() == folder
    manager.add_files([str(path)])
    qtbot.waitUntil(lambda: str(path) in manager.listed_paths(), timeout=SCAN_TIMEOUT_MS)


# -- the manager as a dialog -------------------------------------------------------------


@pytest.fixture
def forget_geometry() -> Iterator[None]:
    """The dialog remembers its geometry for the whole run: each test starts afresh."""
    ModelManagerDialog._last_geometry = None
    yield
    ModelManagerDialog._last_geometry = None


def test_the_manager_is_a_dialog_of_its_own_that_remembers_where_it_was(
    qtbot: QtBot, db: Database, library: Path, forget_geometry: None
) -> None:
    from PySide6.QtWidgets import QDialogButtonBox, QWidget

    db.add_folder(library)
    owner = QWidget()
    qtbot.addWidget(owner)
    owner.resize(1100, 760)
    owner.show()
    manager = ModelManager(db)
    dialog = ModelManagerDialog(manager, owner)
    assert dialog.manager() is manager and dialog.isAncestorOf(manager)
    dialog.show()
    qtbot.waitExposed(dialog)
    qtbot.waitUntil(lambda: not manager.is_scanning(), timeout=SCAN_TIMEOUT_MS)
    # not modal: the chat window goes on taking input beside it
    assert not dialog.isModal() and dialog.windowModality() == Qt.WindowModality.NonModal
    assert dialog.isWindow() and dialog.isSizeGripEnabled()
    screen = dialog.screen()
    assert screen is not None
    area = screen.availableGeometry()
    assert dialog.width() <= min(ModelManagerDialog.DEFAULT_SIZE.width(), area.width() * 0.9)
    assert dialog.height() <= min(ModelManagerDialog.DEFAULT_SIZE.height(), area.height() * 0.9)
    assert dialog.width() >= 640 and dialog.height() >= 400  # room for the table
    assert area.contains(dialog.frameGeometry())
    assert len(rows(manager)) == 3 and table(manager).isVisible()

    dialog.setGeometry(40, 50, 720, 480)
    qtbot.waitUntil(lambda: dialog.width() == 720)
    where = dialog.geometry()
    buttons = dialog.findChild(QDialogButtonBox, "closeButtons")
    assert buttons is not None
    buttons.button(QDialogButtonBox.StandardButton.Close).click()
    assert not dialog.isVisible()  # closed is hidden: the window shows it again
    dialog.show()
    qtbot.waitExposed(dialog)
    assert dialog.geometry() == where
    dialog.hide()
    # a new dialog (a new window, say) opens where the last one was left
    other = ModelManagerDialog(make_manager(qtbot, db), owner)
    other.show()
    qtbot.waitExposed(other)
    assert other.geometry() == where
    other.hide()
    with qtbot.waitSignal(manager.loadRequested, timeout=2000):  # still works when reshown
        dialog.show()
        double_click(qtbot, manager, row_of(manager, "alpha.gguf"))


def test_the_manager_dialog_works_640_px_wide(
    qtbot: QtBot, db: Database, library: Path, forget_geometry: None
) -> None:
    from tests.ui.test_settings_panel import assert_laid_out

    long_name = library / "a-model-with-a-very-long-file-name-for-narrow-windows-Q4_K_M.gguf"
    write_tiny_model(long_name, TinySpec(name="Long Name"))
    db.add_folder(library)
    manager = ModelManager(db)
    dialog = ModelManagerDialog(manager)
    qtbot.addWidget(dialog)
    dialog.show()
    qtbot.waitExposed(dialog)
    qtbot.waitUntil(lambda: not manager.is_scanning(), timeout=SCAN_TIMEOUT_MS)
    assert dialog.minimumSizeHint().width() <= 640
    dialog.resize(640, 480)
    manager.set_loading(str(long_name), 0.4)  # a long "Loading …" line
    manager.show_error(str(library / "beta.gguf"), "There is not enough memory to load it.")
    qtbot.waitUntil(lambda: dialog.width() == 640)
    qtbot.wait(50)
    assert assert_laid_out(dialog) >= 10  # buttons, labels, table, progress, folders
    t = table(manager)
    assert t.isVisible() and t.height() >= 100  # the list keeps room at this size
    assert t.horizontalScrollBar().isVisible()  # the columns scroll, the dialog does not grow
    assert label(manager, "loadingLabel").toolTip() == str(long_name)  # cut text, full path


def test_the_picker_opens_the_manager_window(qtbot: QtBot, db: Database) -> None:
    from PySide6.QtGui import QAction

    from app.ui.model_picker import ModelPicker

    picker = ModelPicker(db)
    qtbot.addWidget(picker)
    picker.rebuild()
    action = picker.menu().findChild(QAction, "picker-manager")
    assert action is not None and action.text() == "Model manager…"  # opens a window
    with qtbot.waitSignal(picker.managerRequested, timeout=1000):
        action.trigger()
