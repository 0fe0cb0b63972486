"""A chat's tools in the real window: the Tools button and its list (the real test MCP
server as a stdio child), counted with the loaded model's tokenizer, the warning past 15%
of the context, the choice kept with the conversation."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from PySide6.QtCore import Qt

from app.ui.mcp_store import McpStore, stdio_server
from app.ui.tool_picker import ToolPicker
from app.ui.tool_selection import ToolSelection
from app.ui.tool_tokens import WARN_SHARE
from tests.mcp.servers import SERVER_SCRIPT


def _picker(qtbot: Any, tab: Any) -> ToolPicker:
    picker: ToolPicker = tab.tools.open_picker()
    qtbot.waitUntil(lambda: bool(picker.items()), timeout=30000)
    # every tool counted (by the model: no "~")
    qtbot.waitUntil(lambda: all(i.text(1) not in ("…", "") for i in picker.items()), timeout=10000)
    return picker


def test_a_chat_picks_its_tools_sees_their_cost_and_keeps_the_choice(
    qtbot: Any, make_window: Any, home: Path
) -> None:
    McpStore().put(stdio_server("test", sys.executable, [str(SERVER_SCRIPT), "stdio"], {}))
    window, _ = make_window()
    tab = window.new_tab()
    assert tab is not None
    assert tab.tools.button.text() == "Tools"  # a new chat has none on
    qtbot.waitUntil(lambda: tab.info.n_ctx > 0, timeout=10000)
    picker = _picker(qtbot, tab)
    names = {i.text(0) for i in picker.items()}
    assert {"echo", "write_file", "sleep"} <= names
    assert not tab.tools.estimated
    assert all(not i.text(1).startswith("~") for i in picker.items())

    echo = next(i for i in picker.items() if i.text(0) == "echo")
    echo.setCheckState(0, Qt.CheckState.Checked)
    assert tab.tools.enabled == {("test", "echo")}
    assert tab.tools.button.text() == "Tools: 1"
    cost = tab.tools.cost()
    assert cost.total == tab.tools.costs[("test", "echo")] > 0
    assert f"{cost.total:,} tokens" in picker.summary.text()
    saved = json.loads((home / "chat-tools.json").read_text())["chats"]
    assert saved == {str(tab.cid): [["test", "echo"]]}

    # all on: the definitions' share of the context decides the warning
    for item in picker.items():
        item.setCheckState(0, Qt.CheckState.Checked)
    cost = tab.tools.cost()
    n_ctx = tab.info.n_ctx
    over = cost.total > WARN_SHARE * n_ctx
    assert tab.tools.warning.isVisibleTo(tab) is over
    if over:
        assert f"{cost.total / n_ctx:.0%}" in tab.tools.warning.text()
    picker.hide()

    # kept: read again as at the next start, the same tools are on
    assert len(tab.tools.enabled) == len(names)
    assert ToolSelection().enabled(tab.cid) == tab.tools.enabled


def test_the_warning_shows_past_the_share_of_a_small_context(qtbot: Any, make_window: Any) -> None:
    McpStore().put(stdio_server("test", sys.executable, [str(SERVER_SCRIPT), "stdio"], {}))
    window, _ = make_window(context={"n_ctx": 256, "n_batch": 256, "n_ubatch": 256})
    tab = window.new_tab()
    assert tab is not None
    qtbot.waitUntil(lambda: tab.info.n_ctx > 0, timeout=10000)
    picker = _picker(qtbot, tab)
    for item in picker.items():
        item.setCheckState(0, Qt.CheckState.Checked)
    assert tab.tools.cost().total > WARN_SHARE * tab.info.n_ctx
    assert tab.tools.warning.isVisibleTo(tab)
    assert "Switch off tools you do not need here" in tab.tools.warning.text()
    for item in picker.items():
        item.setCheckState(0, Qt.CheckState.Unchecked)
    assert not tab.tools.warning.isVisibleTo(tab)
    assert tab.tools.button.text() == "Tools"


def test_a_server_that_fails_is_shown_with_its_sentence(qtbot: Any, make_window: Any) -> None:
    McpStore().put(stdio_server("gone", "no-such-mcp-program", [], {}))
    window, _ = make_window(model=None)
    tab = window.new_tab()
    assert tab is not None
    picker = tab.tools.open_picker()
    qtbot.waitUntil(lambda: tab.tools.runner.connected is not None, timeout=30000)
    top = picker.tree.topLevelItem(0)
    assert top is not None and top.text(1) == "failed"
    child = top.child(0)
    assert child is not None and "was not found" in child.text(0)
    assert picker.items() == []
