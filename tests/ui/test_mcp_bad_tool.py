"""A tool whose schema cannot be turned into a grammar, in the window (issue 27, item 7):
it is left out of the chat's request with a notice naming it, once, and the other tools
still go (before, every message of the chat failed)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from app.ui.mcp_store import McpStore, stdio_server

SERVER = """
from typing import Annotated, Literal

import pydantic
from mcp.server.mcpserver import MCPServer

server = MCPServer("bad-tool-test")

@server.tool()
def pick(color: Literal["red", "blue"]) -> str:
    \"\"\"Pick a colour.\"\"\"
    return f"picked {color}"

@server.tool()
def bad(code: Annotated[str, pydantic.Field(pattern="^a{5000}$")]) -> str:
    \"\"\"A schema no grammar can hold.\"\"\"
    return code

server.run()
"""


def test_a_tool_without_a_grammar_is_left_out_with_a_notice(
    qtbot: Any, make_window: Any, qwen_model: Path, tmp_path: Path
) -> None:
    script = tmp_path / "server.py"
    script.write_text(SERVER, encoding="utf-8")
    McpStore().put(stdio_server("test", sys.executable, [str(script)], {}))
    window, _ = make_window(model=qwen_model, context={"n_ctx": 4096})
    tab = window.new_tab()
    assert tab is not None
    tab.tools.connect()
    qtbot.waitUntil(tab.tools.runner.up_to_date, timeout=30000)
    tab.tools.choose({("test", "pick"), ("test", "bad")})
    request = tab.tool_turns.request(continuing=False)
    assert request is not None and [t.name for t in request.tools] == ["pick"]
    assert tab.notice.isVisible()
    assert tab.notice.text().startswith("The tool 'bad' is left out: ")
    # Said once: the next message does not say it again.
    tab.notice.dismiss()
    again = tab.tool_turns.request(continuing=False)
    assert again is not None and [t.name for t in again.tools] == ["pick"]
    assert not tab.notice.isVisible()
