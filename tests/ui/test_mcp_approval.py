"""The approval dialog and the window's tool rounds, with the real test MCP server
(tests/mcp/mcp_test_server.py) as a stdio child: nothing runs before approval, Deny writes
nothing, Always allow persists for that server's command and that tool only, Stop cancels a
call waiting for approval or running, a crashing server gives a sentence."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QKeySequence
from shiboken6 import isValid

from app.mcp.approval import ApprovalPolicy, ApprovalRequest, Decision
from app.mcp.client import CallOutcome
from app.mcp.host import ModelCall, RoundResult
from app.mcp.loop_guard import LoopGuard
from app.ui.approval_dialog import ApprovalAsker, ApprovalDialog, binding_text
from app.ui.mcp_runtime import McpRuntime
from app.ui.mcp_store import McpStore, stdio_server
from app.ui.tool_runner import Connected, ToolRunner
from tests.mcp.servers import SERVER_SCRIPT


@pytest.fixture
def runtime() -> Iterator[McpRuntime]:
    rt = McpRuntime()
    yield rt
    rt.stop()


def _connect(qtbot: Any, runner: ToolRunner) -> Connected:
    got: list[Connected] = []
    runner.connect(got.append)
    qtbot.waitUntil(lambda: bool(got), timeout=30000)
    return got[0]


def _runner(
    qtbot: Any, runtime: McpRuntime, *extra_args: str, timeout_s: float = 30.0
) -> ToolRunner:
    store = McpStore()
    store.put(stdio_server("test", sys.executable, [str(SERVER_SCRIPT), "stdio", *extra_args], {}))
    runner = ToolRunner(runtime, store, timeout_s=timeout_s)
    connected = _connect(qtbot, runner)
    assert connected.statuses[0].connected, connected.statuses[0].sentence
    return runner


class Answers:
    """Opens real dialogs through the asker and records them."""

    def __init__(self, parent: Any) -> None:
        self.dialogs: list[ApprovalDialog] = []
        self.asker = ApprovalAsker(parent, self.dialogs.append)


def _round(
    qtbot: Any,
    runner: ToolRunner,
    calls: list[ModelCall],
    answers: Answers,
    respond: Any = None,
    guard: LoopGuard | None = None,
) -> RoundResult:
    results: list[RoundResult] = []
    runner.run_round(calls, None, answers.asker.ask, guard or LoopGuard(), results.append)
    seen = len(answers.dialogs)
    deadline = time.monotonic() + 30
    while not results:
        assert time.monotonic() < deadline
        qtbot.wait(20)
        if respond is not None and len(answers.dialogs) > seen:
            dialog = answers.dialogs[seen]
            seen += 1
            respond(dialog)
    return results[0]


def test_the_dialog_shows_everything_and_the_keyboard_reaches_each_choice(qtbot: Any) -> None:
    long_text = "x" * 5000 + " the end"
    request = ApprovalRequest(
        "files",
        'stdio:["npx", "-y", "server-files"]',
        "write_file",
        {"path": "/tmp/a", "text": long_text},
    )
    dialog = ApprovalDialog(request)
    qtbot.addWidget(dialog)
    dialog.show()
    assert dialog.tool_label.text() == "write_file"
    assert "npx -y server-files" in dialog.server_label.text()
    assert binding_text("http:https://x.example/mcp") == "at https://x.example/mcp"
    shown = dialog.arguments.toPlainText()
    assert json.loads(shown) == {"path": "/tmp/a", "text": long_text}  # whole, not cut
    assert dialog.arguments.isReadOnly()
    assert dialog.deny_button.isDefault()  # Enter by habit never runs a tool
    decided: list[object] = []
    dialog.decided.connect(decided.append)
    qtbot.keyClick(dialog, Qt.Key.Key_Escape)
    assert decided == [Decision.DENY]
    second = ApprovalDialog(request)
    qtbot.addWidget(second)
    second.show()
    decided2: list[object] = []
    second.decided.connect(decided2.append)
    # each choice has its own mnemonic (Alt+O, Alt+A, Alt+D)
    keys = {
        QKeySequence.mnemonic(b.text()).toString()
        for b in (second.allow_button, second.always_button, second.deny_button)
    }
    assert keys == {"Alt+O", "Alt+A", "Alt+D"}
    second.allow_button.setFocus()
    qtbot.keyClick(second.allow_button, Qt.Key.Key_Space)
    assert decided2 == [Decision.ALLOW_ONCE]
    # Tab order: the arguments, then the buttons; Space presses the one with the focus
    third = ApprovalDialog(request)
    qtbot.addWidget(third)
    third.show()
    decided3: list[object] = []
    third.decided.connect(decided3.append)
    third.always_button.setFocus()
    qtbot.keyClick(third.always_button, Qt.Key.Key_Space)
    assert decided3 == [Decision.ALWAYS]


def test_nothing_runs_before_approval_and_deny_writes_nothing(
    qtbot: Any, make_window: Any, runtime: McpRuntime, tmp_path: Path
) -> None:
    window, _ = make_window(model=None)
    runner = _runner(qtbot, runtime)
    answers = Answers(window)
    target = tmp_path / "out.txt"
    call = ModelCall("c1", "write_file", {"path": str(target), "text": "hello"})

    def check_then_deny(dialog: ApprovalDialog) -> None:
        assert not target.exists()  # asked before anything ran
        assert json.loads(dialog.arguments.toPlainText()) == dict(call.arguments)
        dialog.deny_button.click()

    result = _round(qtbot, runner, [call], answers, check_then_deny)
    (message,) = result.messages
    assert message.result.outcome is CallOutcome.DENIED
    assert "did not allow" in message.content
    assert not target.exists()

    def allow(dialog: ApprovalDialog) -> None:
        dialog.allow_button.click()

    result = _round(qtbot, runner, [call], answers, allow)
    assert result.messages[0].result.ok
    assert target.read_text() == "hello"
    assert len(answers.dialogs) == 2  # allow once: asked again next time
    runner.close()


def test_always_allow_persists_for_that_server_and_tool_only(
    qtbot: Any, make_window: Any, runtime: McpRuntime, tmp_path: Path, home: Path
) -> None:
    window, _ = make_window(model=None)
    runner = _runner(qtbot, runtime)
    answers = Answers(window)
    first = ModelCall("c1", "write_file", {"path": str(tmp_path / "a.txt"), "text": "a"})
    result = _round(qtbot, runner, [first], answers, lambda d: d.always_button.click())
    assert result.messages[0].result.ok
    grants = json.loads((home / "tool-permissions.json").read_text())["always"]
    assert [(g["server"], g["tool"]) for g in grants] == [("test", "write_file")]

    # the same tool again (other arguments): no dialog
    second = ModelCall("c2", "write_file", {"path": str(tmp_path / "b.txt"), "text": "b"})
    result = _round(qtbot, runner, [second], answers)
    assert result.messages[0].result.ok and (tmp_path / "b.txt").read_text() == "b"
    assert len(answers.dialogs) == 1
    # another tool of the same server still asks
    result = _round(
        qtbot,
        runner,
        [ModelCall("c3", "echo", {"text": "hi"})],
        answers,
        lambda d: d.deny_button.click(),
    )
    assert len(answers.dialogs) == 2 and result.messages[0].result.outcome is CallOutcome.DENIED
    runner.close()

    # the server's command changed (an extra argument): the permission is gone
    changed = _runner(qtbot, runtime, "--changed")
    third = ModelCall("c4", "write_file", {"path": str(tmp_path / "c.txt"), "text": "c"})
    result = _round(qtbot, changed, [third], answers, lambda d: d.deny_button.click())
    assert len(answers.dialogs) == 3
    assert not (tmp_path / "c.txt").exists()
    assert ApprovalPolicy().is_allowed(changed.store.config()[0].servers[0], "write_file") is False
    changed.close()


def test_stop_cancels_a_call_waiting_for_approval_and_a_running_one(
    qtbot: Any, make_window: Any, runtime: McpRuntime, tmp_path: Path
) -> None:
    window, _ = make_window(model=None)
    runner = _runner(qtbot, runtime)
    answers = Answers(window)
    target = tmp_path / "never.txt"
    results: list[RoundResult] = []
    handle = runner.run_round(
        [ModelCall("c1", "write_file", {"path": str(target), "text": "x"})],
        None,
        answers.asker.ask,
        LoopGuard(),
        results.append,
    )
    qtbot.waitUntil(lambda: bool(answers.dialogs), timeout=10000)
    dialog = answers.dialogs[0]
    handle.cancel()
    qtbot.waitUntil(lambda: bool(results), timeout=10000)
    qtbot.waitUntil(lambda: not isValid(dialog) or not dialog.isVisible())  # it closed
    assert results[0].messages[0].result.outcome is CallOutcome.DENIED
    assert not target.exists()

    # a sleeping tool, allowed, then stopped: it ends at once, not after 30 s
    results.clear()
    handle = runner.run_round(
        [ModelCall("c2", "sleep", {"seconds": 30})],
        None,
        answers.asker.ask,
        LoopGuard(),
        results.append,
    )
    qtbot.waitUntil(lambda: len(answers.dialogs) == 2, timeout=10000)
    answers.dialogs[1].allow_button.click()
    qtbot.wait(500)
    start = time.monotonic()
    handle.cancel()
    qtbot.waitUntil(lambda: bool(results), timeout=10000)
    assert time.monotonic() - start < 5
    stopped = results[0]  # a name of its own: mypy keeps the first round's narrowing
    assert stopped.messages[0].result.outcome is CallOutcome.CANCELLED
    runner.close()


def test_a_timeout_and_a_crashing_server_give_sentences(
    qtbot: Any, make_window: Any, runtime: McpRuntime
) -> None:
    window, _ = make_window(model=None)
    runner = _runner(qtbot, runtime, timeout_s=1.0)
    answers = Answers(window)
    allow = lambda d: d.allow_button.click()  # noqa: E731
    result = _round(qtbot, runner, [ModelCall("c1", "sleep", {"seconds": 10})], answers, allow)
    message = result.messages[0]
    assert message.result.outcome is CallOutcome.TIMEOUT
    assert "did not finish within 1 s" in message.result.sentence
    result = _round(qtbot, runner, [ModelCall("c2", "crash", {})], answers, allow)
    message = result.messages[0]
    assert message.result.outcome is CallOutcome.SERVER_FAILED
    assert "The MCP server 'test' stopped working" in message.result.sentence
    assert message.content.startswith("Error:")  # the model is told
    runner.close()
