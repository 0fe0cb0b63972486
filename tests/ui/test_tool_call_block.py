"""The tool-call block: name, server and status in its header; arguments pretty and whole,
the result collapsed until opened; plain text (never HTML); under a message's text."""

from __future__ import annotations

import json
from typing import Any

from PySide6.QtCore import Qt

from app.mcp.client import CallOutcome
from app.ui.message_data import MessageData
from app.ui.message_widget import MessageWidget
from app.ui.tool_call_block import CallState, CallView, ToolCallBlock, state_of


def test_a_block_shows_the_call_and_keeps_the_result_collapsed(qtbot: Any) -> None:
    view = CallView("c1", "write_file", '{"path": "/tmp/a", "text": "<b>hi</b>"}', "files")
    block = ToolCallBlock(view)
    qtbot.addWidget(block)
    block.show()
    assert block.title() == "⚙ write_file (files) — running"
    assert not block.expanded and not block.body.isVisible()
    assert json.loads(block.arguments.text()) == {"path": "/tmp/a", "text": "<b>hi</b>"}
    assert "\n  " in block.arguments.text()  # pretty
    assert block.arguments.textFormat() == Qt.TextFormat.PlainText
    done = CallView(
        view.call_id, view.name, view.arguments, view.server, CallState.DONE, "wrote 9 characters"
    )
    block.set_view(done)
    assert block.title().startswith("✓ write_file") and block.title().endswith("done")
    assert not block.body.isVisible()  # the result stays collapsed
    qtbot.keyClick(block.toggle, Qt.Key.Key_Space)  # the keyboard opens it
    assert block.expanded and block.result.isVisible()
    assert block.result.text() == "wrote 9 characters"
    failed = CallView(
        "c1", "write_file", "not json", "files", CallState.FAILED, "Error: x", "The server died."
    )
    block.set_view(failed)
    assert block.arguments.text() == "not json"  # shown as the model wrote it
    assert block.sentence.isVisible() and block.sentence.text() == "The server died."


def test_states_for_outcomes_and_blocks_under_a_message(qtbot: Any) -> None:
    assert state_of(CallOutcome.OK) is CallState.DONE
    assert state_of(CallOutcome.DENIED) is CallState.DENIED
    assert state_of(CallOutcome.CANCELLED) is CallState.STOPPED
    assert state_of(CallOutcome.TIMEOUT) is CallState.FAILED
    assert state_of(CallOutcome.SERVER_FAILED) is CallState.FAILED
    widget = MessageWidget(MessageData(1, "assistant", "Let me look."), dark=False)
    qtbot.addWidget(widget)
    widget.show()
    calls = widget.tool_calls()
    assert widget.tool_calls() is calls  # one list per message
    calls.set_call(CallView("a", "echo", '{"text": "x"}', "test", CallState.WAITING))
    calls.set_call(CallView("b", "sleep", '{"seconds": 1}', "test"))
    calls.set_call(CallView("a", "echo", '{"text": "x"}', "test", CallState.DENIED))
    assert [b.title() for b in calls.blocks()] == [
        "⊘ echo (test) — denied",
        "⚙ sleep (test) — running",
    ]
    # under the text, above the figures line
    layout = widget._card_layout
    assert layout.indexOf(calls) == layout.indexOf(widget.figures) - 1
