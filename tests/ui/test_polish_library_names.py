"""Two library entries with the same model name are told apart where the name is shown
(issue 20, item 6): the Models ▸ library table and the window's model picker show the file
name, and the folder where the file names are the same too. Real window, real scans."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QTableWidget

from tests.support.gguf_models import TinySpec, write_tiny_model

pytestmark = pytest.mark.qt_log_ignore(r"This plugin does not support")


def name_cells(table: QTableWidget) -> dict[str, str]:
    """Path -> the Name cell's text."""
    out: dict[str, str] = {}
    for row in range(table.rowCount()):
        cell = table.item(row, 0)
        assert cell is not None
        out[str(cell.data(Qt.ItemDataRole.UserRole))] = cell.text()
    return out


def test_two_models_of_one_name_show_their_files(
    qtbot: Any, make_window: Any, tmp_path: Path
) -> None:
    library = tmp_path / "library"
    same = [library / "q4" / "same-Q4_K_M.gguf", library / "q8" / "same-Q8_0.gguf"]
    twins = [library / "old" / "twin.gguf", library / "new" / "twin.gguf"]
    for path in same:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_tiny_model(path, TinySpec(name="Same Model"))
    for path in twins:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_tiny_model(path, TinySpec(name="Twin Model"))
    write_tiny_model(library / "alone.gguf", TinySpec(name="Only One"))
    window, _ = make_window()
    window.db.add_folder(library)
    manager = window.models_ui.model_manager()
    assert manager is not None
    manager.refresh()
    qtbot.waitUntil(lambda: not manager.is_scanning(), timeout=15000)
    table = manager.findChild(QTableWidget, "modelTable")
    assert isinstance(table, QTableWidget)
    qtbot.waitUntil(lambda: len(name_cells(table)) == 5, timeout=15000)
    shown = name_cells(table)
    assert shown[str(same[0])] == "Same Model · same-Q4_K_M.gguf"
    assert shown[str(same[1])] == "Same Model · same-Q8_0.gguf"
    assert shown[str(twins[0])] == "Twin Model · twin.gguf in old"
    assert shown[str(twins[1])] == "Twin Model · twin.gguf in new"
    assert shown[str(library / "alone.gguf")] == "Only One"  # a name of its own stays short
    # the window's model picker: every entry's label is its own
    labels = [e.label for e in window.models_ui.model_picker.entries() if not e.demo]
    assert "Twin Model · twin.gguf in old" in labels and "Twin Model · twin.gguf in new" in labels
    assert len(set(labels)) == len(labels)
