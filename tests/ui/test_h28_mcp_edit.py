"""Preferences ▸ Tools (MCP) (issue 28, item 6): a saved server can be edited (its fields
filled back, its secret kept, a rename replaces it) and Remove asks first (Cancel keeps
it). The real window and the real test MCP server as a stdio child."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from PySide6.QtWidgets import QLineEdit, QMessageBox

from app.ui.mcp_store import McpStore, stdio_server
from tests.mcp.servers import SERVER_SCRIPT
from tests.ui.test_mcp_page import _page, _top, _wait


def test_a_server_is_edited_in_place_and_removed_only_when_confirmed(
    qtbot: Any, make_window: Any, home: Path
) -> None:
    env = {"MODE": "plain", "SERVICE_API_KEY": "sk-kept"}
    McpStore().put(
        stdio_server("test", sys.executable, [str(SERVER_SCRIPT), "stdio"], env),
        ["SERVICE_API_KEY"],
    )
    window, _ = make_window(model=None)
    page = _page(window)
    _wait(qtbot, page)
    page.tree.setCurrentItem(_top(page, 0))
    assert page.edit_button.isEnabled()
    page.edit_button.click()
    qtbot.waitUntil(lambda: page.edit_dialog is not None, timeout=10000)
    dialog = page.edit_dialog
    assert dialog is not None and dialog.isVisible()
    # the saved server, filled back: its command, arguments, variables and secret
    assert dialog.name_edit.text() == "test" and dialog.command_edit.text() == sys.executable
    assert str(SERVER_SCRIPT) in dialog.args_edit.text()
    assert dialog.env_table.rows() == [
        ("MODE", "plain", False),
        ("SERVICE_API_KEY", "sk-kept", True),
    ]
    value = dialog.env_table.cellWidget(1, 1)
    assert isinstance(value, QLineEdit) and value.echoMode() == QLineEdit.EchoMode.Password

    dialog.name_edit.setText("renamed")
    name = dialog.env_table.cellWidget(0, 1)
    assert isinstance(name, QLineEdit)
    name.setText("fancy")
    dialog.save_button.click()
    qtbot.waitUntil(lambda: "Saved 'renamed'" in page.status.text(), timeout=10000)
    _wait(qtbot, page)
    servers = json.loads((home / "mcp.json").read_text(encoding="utf-8"))["mcpServers"]
    assert set(servers) == {"renamed"}  # replaced, not added beside
    assert servers["renamed"]["env"] == {"MODE": "fancy"}
    secrets = (home / "mcp-secrets.json").read_text(encoding="utf-8")
    assert "sk-kept" in secrets and "test\\n" not in secrets  # moved with the new name

    # Remove asks; Cancel keeps the server
    page.tree.setCurrentItem(_top(page, 0))
    page.remove_button.click()
    question = page.remove_question()
    assert question is not None and question.isVisible() and "'renamed'" in question.text()
    question.button(QMessageBox.StandardButton.Cancel).click()
    qtbot.waitUntil(lambda: page.remove_question() is None, timeout=3000)
    _wait(qtbot, page)
    assert "renamed" in json.loads((home / "mcp.json").read_text(encoding="utf-8"))["mcpServers"]
