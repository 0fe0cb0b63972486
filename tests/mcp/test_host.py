"""A tool round through the host: the tools as the model sees them, approval per call,
the loop guard, unknown names; two servers with the same tools do not shadow each other."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from app.mcp.approval import ApprovalPolicy, ApprovalRequest, Decision
from app.mcp.client import CallOutcome, McpManager
from app.mcp.config import McpConfig
from app.mcp.host import ModelCall, RoundResult, ToolHost
from app.mcp.loop_guard import LoopGuard
from tests.mcp.servers import stdio_server

pytestmark = pytest.mark.timeout(120)


def test_a_round_asks_runs_and_answers_each_call(tmp_path: Path) -> None:
    target = tmp_path / "out.txt"
    asked: list[str] = []

    async def ask(request: ApprovalRequest) -> Decision:
        asked.append(request.tool)
        return Decision.DENY if request.tool == "write_file" else Decision.ALLOW_ONCE

    async def main() -> tuple[list[str], RoundResult, RoundResult]:
        async with McpManager(McpConfig((stdio_server(),)), start_timeout=30) as manager:
            host = ToolHost(
                manager,
                ApprovalPolicy(tmp_path / "perms.json"),
                enabled={("test", "echo"), ("test", "write_file")},
            )
            names = [t["function"]["name"] for t in host.openai_tools()]
            guard = LoopGuard(max_rounds=4)
            calls = [
                ModelCall("c1", "echo", {"text": "hi"}),
                ModelCall("c2", "write_file", {"path": str(target), "text": "x"}),
                ModelCall("c3", "sleep", {"seconds": 1}),
            ]
            first = await host.run_round(calls, ask, guard)
            second = await host.run_round([ModelCall("c4", "echo", {"text": "hi"})], ask, guard)
            return names, first, second

    names, first, second = anyio.run(main)
    assert sorted(names) == ["echo", "write_file"]
    echo, write, sleep = first.messages
    assert (echo.call_id, echo.server, echo.content) == ("c1", "test", "echo: hi")
    assert write.result.outcome is CallOutcome.DENIED and not target.exists()
    assert sleep.result.outcome is CallOutcome.UNKNOWN_TOOL, (
        "a tool switched off is unknown to the model"
    )
    assert asked == ["echo", "write_file"]
    assert first.stopped is None
    assert (
        second.stopped is not None and second.messages[0].result.outcome is CallOutcome.LOOP_STOPPED
    )
    assert asked == ["echo", "write_file"], "a stopped call is not asked about"


def test_two_servers_with_the_same_tools_get_distinct_names(tmp_path: Path) -> None:
    async def main() -> tuple[list[str], str]:
        config = McpConfig((stdio_server("one"), stdio_server("two")))
        async with McpManager(config, start_timeout=30) as manager:
            host = ToolHost(
                manager,
                ApprovalPolicy(tmp_path / "p.json"),
                enabled={("one", "echo"), ("two", "echo")},
            )

            async def allow(request: ApprovalRequest) -> Decision:
                return Decision.ALLOW_ONCE

            done = await host.run_round(
                [ModelCall("c", "two__echo", {"text": "t"})], allow, LoopGuard()
            )
            return [t["function"]["name"] for t in host.openai_tools()], done.messages[0].server

    names, server = anyio.run(main)
    assert sorted(names) == ["one__echo", "two__echo"]
    assert server == "two"
