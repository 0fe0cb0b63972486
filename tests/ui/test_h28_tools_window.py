"""The chat's tools in the window (issue 28, item 6): the Tools popup stays on the screen
wherever the window is, a tool call can be required from it (the CLI's --tool-choice), and
the tool names are shown whole. The real window and the real test MCP server (stdio)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from PySide6.QtCore import QPoint

from app.engine.tool_calls.request import ToolChoiceMode
from app.ui.mcp_store import McpStore, stdio_server
from tests.mcp.servers import SERVER_SCRIPT
from tests.ui.test_tool_picker import _picker


def test_the_popup_stays_on_screen_and_can_require_a_call(
    qtbot: Any, make_window: Any, home: Path
) -> None:
    McpStore().put(stdio_server("test", sys.executable, [str(SERVER_SCRIPT), "stdio"], {}))
    window, _ = make_window()
    tab = window.new_tab()
    screen = window.screen().availableGeometry()
    # the window at the bottom right of the screen: the popup cannot open below the button
    window.resize(900, 600)
    window.move(screen.right() - 900, screen.bottom() - 600)
    qtbot.waitUntil(lambda: tab.info.n_ctx > 0, timeout=10000)
    picker = _picker(qtbot, tab)
    frame = picker.frameGeometry()
    assert screen.contains(frame), (frame, screen)
    button = tab.tools.button
    assert frame.bottom() < button.mapToGlobal(QPoint(0, button.height())).y()  # above it

    # names whole: the name column is wide enough for every name
    metrics = picker.tree.fontMetrics()
    for item in picker.items():
        assert picker.tree.columnWidth(0) >= metrics.horizontalAdvance(item.text(0))

    echo = next(i for i in picker.items() if i.text(0) == "echo")
    echo.setCheckState(0, echo.checkState(0).Checked)
    required = picker.choice.findData(ToolChoiceMode.REQUIRED)
    picker.choice.setCurrentIndex(required)
    picker.choice.activated.emit(required)
    assert tab.tool_turns.choice is ToolChoiceMode.REQUIRED
    assert "must call" in button.text()
    request = tab.tool_turns.request(continuing=False)
    assert request is not None and request.mode is ToolChoiceMode.REQUIRED
    # after tool results the model may answer in words (no forced loop)
    again = tab.tool_turns.request(continuing=True)
    assert again is not None and again.mode is ToolChoiceMode.AUTO
    picker.hide()
    assert tab.tools.open_picker().choice.currentData() == ToolChoiceMode.REQUIRED
