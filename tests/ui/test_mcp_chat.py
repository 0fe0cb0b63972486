"""Tool calls in the chat, end to end in the real window: a tiny model with Qwen 2.5's
template makes a call (the chat's tool choice set to "required", so the random model's
call is certain), the call block shows it waiting for approval, the real test MCP server
(a stdio child) runs it once allowed, the model answers the result; calls and results are
stored and come back when the chat is opened again; Deny and Stop."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from app.engine.tool_calls.request import ToolChoiceMode
from app.messages import TOOL_CALL_ID_KEY, stored_tool_calls
from app.ui.approval_dialog import ApprovalDialog
from app.ui.mcp_store import McpStore, stdio_server
from app.ui.tool_call_block import CallState
from tests.ui.conftest import send

# The test's MCP server: its tools take choices (enums), so the random tiny model's forced
# call is short and complete (a free string would run to max_tokens).
SERVER = """
import os, sys
from pathlib import Path
from typing import Literal
from mcp.server.mcpserver import MCPServer

server = MCPServer("chat-test")

@server.tool()
def pick(color: Literal["red", "blue"]) -> str:
    \"\"\"Pick a colour.\"\"\"
    return f"picked {color}"

@server.tool()
def write_note(slot: Literal["a", "b"]) -> str:
    \"\"\"Write a note into a slot.\"\"\"
    Path(os.environ["NOTES_DIR"], slot + ".txt").write_text("note", encoding="utf-8")
    return "written"

server.run()
"""


def _chat_with_tool(
    qtbot: Any, make_window: Any, model: Path, tool: str, folder: Path
) -> tuple[Any, Any]:
    script = folder / "chat_server.py"
    script.write_text(SERVER, encoding="utf-8")
    notes = folder / "notes"
    notes.mkdir()
    McpStore().put(stdio_server("test", sys.executable, [str(script)], {"NOTES_DIR": str(notes)}))
    window, _ = make_window(model=model, context={"n_ctx": 4096})
    tab = window.new_tab()
    assert tab is not None
    runner = tab.tools.runner
    tab.tools.connect()
    qtbot.waitUntil(runner.up_to_date, timeout=30000)
    tab.tools.choose({("test", tool)})
    tab.tool_turns.choice = ToolChoiceMode.REQUIRED
    # room for the forced call (its random string), short enough for a quick test
    sampling = {**tab.conversation.sampling, "max_tokens": 400}
    window.db.update_conversation_settings(tab.cid, sampling=sampling)
    tab.conversation = window.db.get_conversation(tab.cid)
    tab.settings.set_values(tab.conversation.system_prompt, tab.conversation.sampling)
    return window, tab


def _dialog(qtbot: Any, tab: Any) -> ApprovalDialog:
    qtbot.waitUntil(lambda: bool(tab.tool_turns.asker.dialogs), timeout=60000)
    dialog: ApprovalDialog = tab.tool_turns.asker.dialogs[0]
    return dialog


def _blocks(tab: Any, message_id: int) -> list[Any]:
    widget = tab.view.widget_for(message_id)
    assert widget is not None
    return list(widget.tool_calls().blocks())


def _answer_all(qtbot: Any, tab: Any, choose: str) -> list[dict[str, Any]]:
    """Answer each dialog as it comes (the model may make several calls) until the turn
    ends; the arguments each showed."""
    shown: list[dict[str, Any]] = []
    answered: set[int] = set()

    def step() -> bool:
        for dialog in tab.tool_turns.asker.dialogs:
            if id(dialog) not in answered and dialog.isVisible():
                answered.add(id(dialog))
                shown.append(json.loads(dialog.arguments.toPlainText()))
                getattr(dialog, f"{choose}_button").click()
        return not tab.generating

    qtbot.waitUntil(step, timeout=60000)
    return shown


def test_a_call_is_asked_run_answered_stored_and_shown_again(
    qtbot: Any, make_window: Any, qwen_model: Path, tmp_path: Path
) -> None:
    window, tab = _chat_with_tool(qtbot, make_window, qwen_model, "pick", tmp_path)
    send(qtbot, tab, "Pick a colour.")
    dialog = _dialog(qtbot, tab)
    caller = next(m for m in reversed(tab.branch) if m.role == "assistant")
    blocks = _blocks(tab, caller.id)
    assert blocks[0].state is CallState.WAITING  # the first call asks; the others wait
    assert all(b.view.name == "pick" and b.view.server == "test" for b in blocks)
    assert tab.generating and tab.stop_button.isVisible()  # the round keeps the tab busy
    first = json.loads(dialog.arguments.toPlainText())
    assert first["color"] in ("red", "blue")
    arguments = _answer_all(qtbot, tab, "allow")
    assert arguments[0] == first and len(arguments) == len(blocks)

    assert [b.state for b in blocks] == [CallState.DONE] * len(blocks)
    assert [b.view.result for b in blocks] == [f"picked {a['color']}" for a in arguments]
    # stored: the calls with the reply, a result for each under it, then the model's answer
    thread = window.db.get_thread(tab.cid)
    n = len(blocks)
    assert [m.role for m in thread] == ["user", "assistant", *["tool"] * n, "assistant"]
    calls = stored_tool_calls(thread[1].meta)
    assert [json.loads(c.arguments) for c in calls] == arguments
    results = thread[2 : 2 + n]
    assert [m.meta[TOOL_CALL_ID_KEY] for m in results] == [c.call_id for c in calls]
    assert [m.content for m in results] == [f"picked {a['color']}" for a in arguments]
    # the tool messages' own widgets are hidden: their text is in the blocks
    for message in results:
        widget = tab.view.widget_for(message.id)
        assert widget is not None and not widget.isVisibleTo(tab.view)

    # opened again: the blocks come back from storage, done, with their results
    cid = tab.cid
    window.close_tab(window.tab_widget.indexOf(tab))
    window.open_conversation(cid)
    again = window.tab_for(cid)
    assert again is not None and again is not tab
    shown = _blocks(again, thread[1].id)
    assert [b.state for b in shown] == [CallState.DONE] * n
    assert [b.view.result for b in shown] == [m.content for m in results]
    assert [json.loads(b.view.arguments) for b in shown] == arguments
    # its tools are still on, and its next message offers them
    assert again.tools.enabled == {("test", "pick")}
    request = again.tool_turns.request(continuing=False)
    assert request is not None and [t.name for t in request.tools] == ["pick"]


def test_deny_writes_nothing_and_the_model_is_told(
    qtbot: Any, make_window: Any, qwen_model: Path, tmp_path: Path
) -> None:
    window, tab = _chat_with_tool(qtbot, make_window, qwen_model, "write_note", tmp_path)
    send(qtbot, tab, "Write a note.")
    _dialog(qtbot, tab)
    assert list((tmp_path / "notes").iterdir()) == []  # asked before anything ran
    denied = _answer_all(qtbot, tab, "deny")
    assert list((tmp_path / "notes").iterdir()) == []
    thread = window.db.get_thread(tab.cid)
    tools = [m for m in thread if m.role == "tool"]
    assert len(tools) == len(denied)
    for tool in tools:
        assert tool.content.startswith("Error: The user did not allow the tool 'write_note'")
    assert [b.state for b in _blocks(tab, thread[1].id)] == [CallState.DENIED] * len(denied)
    assert thread[-1].role == "assistant"  # the model answered without the tool


def test_stop_while_a_call_waits_ends_the_turn_and_sends_nothing(
    qtbot: Any, make_window: Any, qwen_model: Path, tmp_path: Path
) -> None:
    window, tab = _chat_with_tool(qtbot, make_window, qwen_model, "pick", tmp_path)
    send(qtbot, tab, "Pick a colour.")
    dialog = _dialog(qtbot, tab)
    tab.stop_button.click()
    qtbot.waitUntil(lambda: not tab.generating, timeout=20000)
    qtbot.waitUntil(lambda: not tab.tool_turns.asker.dialogs, timeout=5000)
    assert dialog.decision is not None  # closed, denied by the stop
    thread = window.db.get_thread(tab.cid)
    assert [m.role for m in thread] == ["user", "assistant"]  # no result, no new reply
    blocks = _blocks(tab, thread[1].id)
    assert [b.state for b in blocks] == [CallState.STOPPED] * len(blocks)
    assert "not given their results" in tab.notice.text()


def test_closing_the_tab_while_a_call_waits_ends_the_round(
    qtbot: Any, make_window: Any, qwen_model: Path, tmp_path: Path
) -> None:
    window, tab = _chat_with_tool(qtbot, make_window, qwen_model, "write_note", tmp_path)
    send(qtbot, tab, "Write a note.")
    _dialog(qtbot, tab)
    runner = tab.tools.runner
    cid = tab.cid
    window.close_tab(window.tab_widget.indexOf(tab))
    loop = runner.runtime.loop()

    def rounds_left() -> int:
        return asyncio.run_coroutine_threadsafe(_round_tasks(), loop).result(5)

    qtbot.waitUntil(lambda: rounds_left() == 0, timeout=10000)
    assert list((tmp_path / "notes").iterdir()) == []  # denied: nothing ran
    assert [m.role for m in window.db.get_thread(cid)] == ["user", "assistant"]


async def _round_tasks() -> int:
    """Tool rounds still running on the MCP thread."""
    me = asyncio.current_task()
    return sum(
        1 for t in asyncio.all_tasks() if t is not me and "ToolRunner._round" in repr(t.get_coro())
    )
