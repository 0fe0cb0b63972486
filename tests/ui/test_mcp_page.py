"""Preferences ▸ Tools (MCP) in the real window, with the real test MCP server
(tests/mcp/mcp_test_server.py, on the mcp SDK) as a stdio child."""

from __future__ import annotations

import itertools
import json
import sys
import time
from pathlib import Path
from typing import Any

from PySide6.QtCore import Qt, QTimer
from PySide6.QtWidgets import QLineEdit, QMessageBox, QTreeWidgetItem

from app.mcp.config import load_config
from app.ui.mcp_page import McpPage
from app.ui.mcp_store import McpStore, looks_secret
from tests.mcp.servers import SERVER_SCRIPT, http_test_server


def _page(window: Any) -> McpPage:
    dialog = window.open_preferences()
    page = dialog.mcp_page
    assert isinstance(page, McpPage)
    return page


def _top(page: McpPage, index: int) -> QTreeWidgetItem:
    item = page.tree.topLevelItem(index)
    assert item is not None
    return item


def _wait(qtbot: Any, page: McpPage, timeout: int = 30000) -> None:
    qtbot.waitUntil(lambda: not page.busy(), timeout=timeout)


def test_secret_names() -> None:
    for name in ("API_KEY", "GITHUB_TOKEN", "Authorization", "X-Api-Key", "apiKey", "DB_PASSWORD"):
        assert looks_secret(name), name
    for name in ("DEBUG", "ROOT_DIR", "Accept", "LOG_LEVEL", "MONKEY"):
        assert not looks_secret(name), name


def test_add_a_stdio_server_keeps_its_secret_out_of_the_file_and_lists_its_tools(
    qtbot: Any, make_window: Any, home: Path
) -> None:
    window, _ = make_window()
    page = _page(window)
    _wait(qtbot, page)
    assert "No MCP servers yet" in page.status.text()
    dialog = page.add_server()
    dialog.name_edit.setText("test")
    dialog.command_edit.setText(sys.executable)
    dialog.args_edit.setText(f'"{SERVER_SCRIPT}" stdio')
    dialog.env_table.add_row("MODE", "plain")
    row = dialog.env_table.add_row()
    name_edit, value_edit = (dialog.env_table.cellWidget(row, c) for c in (0, 1))
    assert isinstance(name_edit, QLineEdit) and isinstance(value_edit, QLineEdit)
    qtbot.keyClicks(name_edit, "SERVICE_API_KEY")  # typed: the secret box ticks itself
    value_edit.setText("sk-very-secret")
    assert value_edit.echoMode() == QLineEdit.EchoMode.Password
    dialog.save_button.click()
    assert not dialog.isVisible()
    qtbot.waitUntil(lambda: "works" in page.status.text(), timeout=30000)
    _wait(qtbot, page)

    text = (home / "mcp.json").read_text(encoding="utf-8")
    assert "sk-very-secret" not in text
    data = json.loads(text)["mcpServers"]["test"]
    assert data["env"] == {"MODE": "plain"}
    assert data["llamadeskSecrets"] == ["SERVICE_API_KEY"]
    assert "sk-very-secret" in (home / "mcp-secrets.json").read_text(encoding="utf-8")
    assert (home / "mcp-secrets.json").stat().st_mode & 0o077 == 0
    # the file stays readable by `llamadesk mcp list` (the mcpServers shape)
    assert load_config(home / "mcp.json").servers[0].name == "test"

    status = page.statuses["test"]
    names = {t.name for t in status.tools}
    assert {"echo", "write_file", "environment"} <= names
    cost = page.costs["test"]
    assert not cost.estimated  # the loaded model counted them
    assert all(n > 5 for n in cost.tokens)
    item = _top(page, 0)
    assert item.childCount() == len(status.tools)
    child = item.child(0)
    assert child is not None and child.text(3).endswith("tokens")
    assert f"{cost.total:,} tokens" in page.status.text()

    # the secret reaches the child (resolved from the store), and only the given variables
    config, problems = McpStore().config()
    assert not problems
    (server,) = config.servers
    assert server.env["SERVICE_API_KEY"] == "sk-very-secret"  # type: ignore[union-attr]


def test_import_an_mcp_json_as_it_is(
    qtbot: Any, make_window: Any, home: Path, tmp_path: Path
) -> None:
    source = tmp_path / "claude.json"
    source.write_text(
        json.dumps(
            {
                "mcpServers": {
                    "files": {
                        "command": sys.executable,
                        "args": [str(SERVER_SCRIPT), "stdio"],
                        "env": {"GITHUB_TOKEN": "ghp_secret", "DEBUG": "1"},
                        "type": "stdio",
                    },
                    "web": {
                        "url": "https://example.invalid/mcp",
                        "headers": {"Authorization": "Bearer abc123", "Accept": "json"},
                    },
                    "old": {"command": "nothing-here", "disabled": True},
                }
            }
        ),
        encoding="utf-8",
    )
    window, _ = make_window(model=None)
    page = _page(window)
    _wait(qtbot, page)
    page.import_file(source)
    qtbot.waitUntil(lambda: "Imported" in page.status.text(), timeout=10000)
    _wait(qtbot, page)
    assert "2 secret value(s)" in page.status.text()
    text = (home / "mcp.json").read_text(encoding="utf-8")
    assert "ghp_secret" not in text and "abc123" not in text
    saved = json.loads(text)["mcpServers"]
    assert saved["files"]["type"] == "stdio"  # keys this app does not use are kept
    assert saved["files"]["env"] == {"DEBUG": "1"}
    assert saved["web"]["headers"] == {"Accept": "json"}
    assert saved["old"]["disabled"] is True
    assert [_top(page, i).text(0) for i in range(3)] == ["files", "web", "old"]
    assert _top(page, 2).checkState(0) == Qt.CheckState.Unchecked
    config, _ = McpStore().config()
    assert {s.name for s in config.servers} == {"files", "web"}
    web = config.server("web")
    assert web is not None and web.headers["Authorization"] == "Bearer abc123"  # type: ignore[union-attr]

    # switched off in the list: written as disabled, left out of what the chats connect
    _top(page, 0).setCheckState(0, Qt.CheckState.Unchecked)
    qtbot.waitUntil(lambda: "'files' is off" in page.status.text(), timeout=10000)
    _wait(qtbot, page)
    assert json.loads((home / "mcp.json").read_text())["mcpServers"]["files"]["disabled"] is True
    config, _ = McpStore().config()
    assert {s.name for s in config.servers} == {"web"}

    # removed: its secret goes too
    page.tree.setCurrentItem(_top(page, 1))
    page.remove_button.click()
    question = page.remove_question()  # Remove asks first (issue 28)
    assert question is not None and "'web'" in question.text()
    question.button(QMessageBox.StandardButton.Yes).click()
    qtbot.waitUntil(lambda: "Removed 'web'" in page.status.text(), timeout=10000)
    _wait(qtbot, page)
    assert "abc123" not in (home / "mcp-secrets.json").read_text(encoding="utf-8")


def test_a_bad_file_is_refused_whole_with_a_sentence(
    qtbot: Any, make_window: Any, home: Path, tmp_path: Path
) -> None:
    source = tmp_path / "bad.json"
    source.write_text('{"mcpServers": {"a": {"command": "x"}, "b": {"url": "ftp://x"}}}')
    window, _ = make_window(model=None)
    page = _page(window)
    _wait(qtbot, page)
    page.import_file(source)
    _wait(qtbot, page)
    assert "'url' must be an http:// or https:// address" in page.status.text()
    assert not (home / "mcp.json").exists()


def test_a_server_that_will_not_start_or_hangs_gives_a_sentence_and_the_window_goes_on(
    qtbot: Any, make_window: Any, tmp_path: Path
) -> None:
    hang = tmp_path / "hang.py"
    hang.write_text("import time\ntime.sleep(60)\n")
    window, _ = make_window(model=None)
    page = _page(window)
    page._probe_timeout_s = 2.0
    _wait(qtbot, page)
    store = page.store
    from app.ui.mcp_store import stdio_server

    store.put(stdio_server("missing", "no-such-program-here", [], {}))
    store.put(stdio_server("hangs", sys.executable, [str(hang)], {}))
    page.reload()
    _wait(qtbot, page)

    ticks: list[float] = []
    timer = QTimer()
    timer.timeout.connect(lambda: ticks.append(time.monotonic()))
    timer.start(50)
    page.test("missing")
    page.test("hangs")
    _wait(qtbot, page, timeout=20000)
    timer.stop()
    assert "the command 'no-such-program-here' was not found" in page.statuses["missing"].sentence
    assert "did not answer within 2 s" in page.statuses["hangs"].sentence
    assert _top(page, 1).text(3) == "failed"
    # the GUI thread kept running meanwhile (no gap near the 2 s the hung server took)
    gaps = [b - a for a, b in itertools.pairwise(ticks)]
    assert len(ticks) > 10 and max(gaps) < 1.0


def test_an_http_server_with_a_secret_header(qtbot: Any, make_window: Any, home: Path) -> None:
    with http_test_server() as url:
        window, _ = make_window(model=None)
        page = _page(window)
        _wait(qtbot, page)
        dialog = page.add_server()
        dialog.name_edit.setText("web")
        dialog.http_radio.setChecked(True)
        dialog.url_edit.setText(url)
        dialog.headers_table.add_row("Authorization", "Bearer t0ps3cret")
        dialog.save_button.click()
        qtbot.waitUntil(lambda: "web" in page.statuses, timeout=30000)
        _wait(qtbot, page)
        assert page.statuses["web"].connected, page.statuses["web"].sentence
        assert "estimated: no model is loaded" in page.status.text()
        assert page.costs["web"].estimated
        text = (home / "mcp.json").read_text(encoding="utf-8")
        assert "t0ps3cret" not in text
        assert json.loads(text)["mcpServers"]["web"] == {
            "url": url,
            "llamadeskSecrets": ["Authorization"],
        }
