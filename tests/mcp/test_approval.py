"""Every call asks first: nothing runs before approval, Deny writes nothing and gives the
model an error result, Always-allow persists for that server and tool only and is dropped
when the server's command changes."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from app.mcp.approval import (
    ApprovalPolicy,
    ApprovalRequest,
    Decision,
    denied_result,
    permissions_path,
)
from app.mcp.client import CallOutcome, McpConnection, ToolResult
from app.mcp.config import HttpServer, StdioServer
from tests.mcp.servers import stdio_server

pytestmark = pytest.mark.timeout(90)


def _approved_write(
    policy: ApprovalPolicy, server: StdioServer, target: Path, decision: Decision
) -> tuple[list[ApprovalRequest], ToolResult]:
    asked: list[ApprovalRequest] = []
    arguments = {"path": str(target), "text": "hello"}

    async def ask(request: ApprovalRequest) -> Decision:
        assert not target.exists(), "nothing runs before the user answers"
        asked.append(request)
        return decision

    async def main() -> ToolResult:
        async with McpConnection(server, 30) as connection:
            if await policy.authorize(server, "write_file", arguments, ask):
                return await connection.call("write_file", arguments)
            return denied_result(server.name, "write_file")

    return asked, anyio.run(main)


def test_deny_writes_nothing_and_tells_the_model(tmp_path: Path) -> None:
    policy = ApprovalPolicy(tmp_path / "perms.json")
    target = tmp_path / "out.txt"
    asked, result = _approved_write(policy, stdio_server(), target, Decision.DENY)
    assert not target.exists()
    assert result.outcome is CallOutcome.DENIED
    assert (
        result.text
        == "Error: The user did not allow the tool 'write_file' on the MCP server 'test' to run."
    )
    (request,) = asked
    assert (request.server, request.tool) == ("test", "write_file")
    assert '"text": "hello"' in request.arguments_text and str(target) in request.arguments_text
    assert not (tmp_path / "perms.json").exists()


def test_allow_once_runs_once_and_asks_again(tmp_path: Path) -> None:
    policy = ApprovalPolicy(tmp_path / "perms.json")
    target = tmp_path / "out.txt"
    asked, result = _approved_write(policy, stdio_server(), target, Decision.ALLOW_ONCE)
    assert result.ok and target.read_text() == "hello" and len(asked) == 1
    assert not policy.is_allowed(stdio_server(), "write_file")


def test_always_allow_persists_for_that_server_and_tool_only(tmp_path: Path) -> None:
    path = tmp_path / "perms.json"
    server = stdio_server()
    target = tmp_path / "out.txt"
    asked, result = _approved_write(ApprovalPolicy(path), server, target, Decision.ALWAYS)
    assert result.ok and len(asked) == 1
    target.unlink()

    again = ApprovalPolicy(path)  # as after a restart
    assert again.is_allowed(server, "write_file")
    asked, result = _approved_write(again, server, target, Decision.DENY)
    assert asked == [] and result.ok and target.exists(), "not asked again"

    assert not again.is_allowed(server, "echo")
    assert not again.is_allowed(stdio_server("other"), "write_file")
    changed = StdioServer(server.name, server.command, (*server.args, "--flag"), server.env)
    assert not again.is_allowed(changed, "write_file"), "a changed command drops the permission"
    assert not again.is_allowed(HttpServer(server.name, "http://127.0.0.1:1/mcp"), "write_file")


def test_revoke_and_an_unreadable_file(tmp_path: Path) -> None:
    path = tmp_path / "perms.json"
    policy = ApprovalPolicy(path)
    server = stdio_server()
    policy.allow_always(server, "echo")
    policy.revoke(server, "echo")
    assert not ApprovalPolicy(path).is_allowed(server, "echo")
    path.write_text("{broken", encoding="utf-8")
    broken = ApprovalPolicy(path)
    assert not broken.is_allowed(server, "echo")
    assert broken.problem.startswith(f"The tool permissions in {path} could not be read")


def test_the_permissions_live_in_the_data_folder(tmp_path: Path) -> None:
    assert permissions_path().parent == Path(__import__("os").environ["LLAMADESK_HOME"])
