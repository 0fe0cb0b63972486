"""Preferences ▸ Tools asks before it connects an MCP server on plain ``http://`` to
another computer (the real test server at this machine's own network address), as the
Engines page does for remote engines: Cancel saves nothing and sends nothing; "Use it
unencrypted" keeps the answer in the entry and connects."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from PySide6.QtWidgets import QMessageBox

from app.ui.mcp_page import McpPage
from tests.support.lan_mcp import lan_mcp_server


def _page(window: Any) -> McpPage:
    page = window.open_preferences().mcp_page
    assert isinstance(page, McpPage)
    return page


def _add(page: McpPage, url: str) -> None:
    dialog = page.add_server()
    dialog.name_edit.setText("far")
    dialog.http_radio.setChecked(True)
    dialog.url_edit.setText(url)
    dialog.save_button.click()


def _allow_and_connect(qtbot: Any, page: McpPage) -> None:
    """Answer the open question with Yes: "far" is then tested and connected."""
    box = page.confirmation()
    assert box is not None
    box.done(QMessageBox.StandardButton.Yes)
    qtbot.waitUntil(lambda: "far" in page.statuses, timeout=30000)
    qtbot.waitUntil(lambda: not page.busy(), timeout=30000)
    assert page.statuses["far"].connected, page.statuses["far"].sentence


def test_the_window_asks_before_plain_http_to_another_computer(
    qtbot: Any, make_window: Any, home: Path
) -> None:
    with lan_mcp_server() as url:
        window, _ = make_window(model=None)
        page = _page(window)
        qtbot.waitUntil(lambda: not page.busy(), timeout=30000)
        _add(page, url)
        qtbot.waitUntil(lambda: page.confirmation() is not None, timeout=10000)
        box = page.confirmation()
        assert box is not None and "plain http:// to another computer" in box.text()
        box.done(QMessageBox.StandardButton.Cancel)
        assert page.confirmation() is None
        assert "was not added" in page.status.text()
        assert not (home / "mcp.json").exists() or "far" not in (home / "mcp.json").read_text()
        assert "far" not in page.statuses

        _add(page, url)
        qtbot.waitUntil(lambda: page.confirmation() is not None, timeout=10000)
        _allow_and_connect(qtbot, page)
        entry = json.loads((home / "mcp.json").read_text())["mcpServers"]["far"]
        assert entry == {"url": url, "llamadeskAllowInsecureHttp": True}


def test_an_imported_entry_is_asked_about_at_its_test(
    qtbot: Any, make_window: Any, home: Path, tmp_path: Path
) -> None:
    with lan_mcp_server() as url:
        other = tmp_path / "other-mcp.json"
        other.write_text(json.dumps({"mcpServers": {"far": {"url": url}}}), encoding="utf-8")
        window, _ = make_window(model=None)
        page = _page(window)
        qtbot.waitUntil(lambda: not page.busy(), timeout=30000)
        page.import_file(other)
        qtbot.waitUntil(lambda: [e.name for e in page.entries] == ["far"], timeout=30000)
        page.test("far")
        box = page.confirmation()
        assert box is not None
        box.done(QMessageBox.StandardButton.Cancel)
        assert "far" not in page.statuses and "was not connected" in page.status.text()
        page.test("far")
        _allow_and_connect(qtbot, page)
        saved = json.loads((home / "mcp.json").read_text())["mcpServers"]["far"]
        assert saved["llamadeskAllowInsecureHttp"] is True
