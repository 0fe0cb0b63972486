"""Connections to a real MCP server (the SDK's MCPServer in a child process, over stdio
and over Streamable HTTP): tools listed and called, the timeout and Stop of a sleeping
tool, a crash, a server that will not start or never answers: typed results, sentences."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import anyio
import pytest

from app.mcp.client import CallOutcome, McpConnection, McpManager, ServerStatus, ToolResult
from app.mcp.config import HttpServer, McpConfig, ServerConfig, StdioServer
from tests.mcp.servers import stdio_server

pytestmark = pytest.mark.timeout(90)
TOOLS = {"echo", "write_file", "sleep", "crash", "environment", "fail"}
T = TypeVar("T")


def _with(
    server: ServerConfig, body: Callable[[McpConnection], Awaitable[T]], start_timeout: float = 30
) -> T:
    async def main() -> T:
        async with McpConnection(server, start_timeout) as connection:
            return await body(connection)

    return anyio.run(main)


def _servers(http_server: HttpServer) -> list[ServerConfig]:
    return [stdio_server(), http_server]


@pytest.mark.parametrize("which", ["stdio", "http"])
def test_tools_are_listed_and_called(http_server: HttpServer, which: str) -> None:
    server = stdio_server() if which == "stdio" else http_server

    async def body(c: McpConnection) -> tuple[set[str], ToolResult, ToolResult, ToolResult]:
        names = {t.name for t in c.status.tools}
        return (
            names,
            await c.call("echo", {"text": "hi"}),
            await c.call("fail", {"reason": "no"}),
            await c.call("nope", {}),
        )

    names, echo, fail, unknown = _with(server, body)
    assert names == TOOLS
    assert echo == ToolResult(CallOutcome.OK, "echo: hi")
    assert fail.outcome is CallOutcome.TOOL_ERROR and "reported an error" in fail.sentence
    assert unknown.outcome is CallOutcome.UNKNOWN_TOOL
    assert unknown.sentence == f"there is no tool 'nope' on the MCP server '{server.name}'."


def test_the_stdio_child_gets_only_its_environment_and_a_minimal_path(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("LLAMADESK_SECRET_TOKEN", "s3cret")

    async def body(c: McpConnection) -> ToolResult:
        return await c.call("environment", {})

    result = _with(stdio_server(env={"GIVEN": "1"}), body)
    names = (
        set(json.loads(result.text))
        if result.text.startswith("[")
        else set(result.text.split("\n"))
    )
    # Python itself may add LC_CTYPE (its C-locale coercion); nothing of the parent's.
    assert names - {"LC_CTYPE"} == {"GIVEN", "PATH"}


@pytest.mark.parametrize("which", ["stdio", "http"])
def test_a_sleeping_tool_times_out_and_the_server_stays_usable(
    http_server: HttpServer, which: str
) -> None:
    server = stdio_server() if which == "stdio" else http_server

    async def body(c: McpConnection) -> tuple[ToolResult, float, ToolResult]:
        start = time.monotonic()
        slow = await c.call("sleep", {"seconds": 30}, timeout=1.0)
        return slow, time.monotonic() - start, await c.call("echo", {"text": "again"})

    slow, took, after = _with(server, body)
    assert slow.outcome is CallOutcome.TIMEOUT
    assert (
        slow.sentence
        == f"The tool 'sleep' on the MCP server '{server.name}' did not finish within 1 s and was stopped."
    )
    assert took < 10
    assert after.ok


@pytest.mark.parametrize("which", ["stdio", "http"])
def test_stop_cancels_a_sleeping_tool(http_server: HttpServer, which: str) -> None:
    server = stdio_server() if which == "stdio" else http_server

    async def body(c: McpConnection) -> tuple[ToolResult, float]:
        stop = anyio.Event()
        start = time.monotonic()

        async def press_stop() -> None:
            await anyio.sleep(0.5)
            stop.set()

        async with anyio.create_task_group() as group:
            group.start_soon(press_stop)
            result = await c.call("sleep", {"seconds": 30}, cancel=stop)
        return result, time.monotonic() - start

    result, took = _with(server, body)
    assert result.outcome is CallOutcome.CANCELLED
    assert result.text.startswith("Error: ") and "was stopped" in result.sentence
    assert took < 10


def test_a_crashing_server_gives_a_sentence() -> None:
    async def body(c: McpConnection) -> tuple[ToolResult, ToolResult]:
        return await c.call("crash", {}), await c.call("echo", {"text": "x"})

    crash, after = _with(stdio_server(), body)
    assert crash.outcome is CallOutcome.SERVER_FAILED
    assert crash.sentence.startswith("The MCP server 'test' stopped working")
    assert after.outcome is CallOutcome.SERVER_FAILED and after.sentence == crash.sentence


def test_servers_that_will_not_start_are_sentences_and_the_others_work() -> None:
    config = McpConfig(
        (
            StdioServer("missing", "/nonexistent/server-binary"),
            StdioServer(
                "dies",
                sys.executable,
                ("-c", "import sys; print('bad flag', file=sys.stderr); sys.exit(2)"),
            ),
            stdio_server("fine"),
        )
    )

    async def main() -> tuple[tuple[ServerStatus, ...], ToolResult, ToolResult]:
        async with McpManager(config, start_timeout=30) as manager:
            dead = await manager.call("dies", "echo", {})
            return manager.statuses, dead, await manager.call("fine", "echo", {"text": "ok"})

    (missing, dies, fine), call_dead, call_fine = anyio.run(main)
    assert missing.sentence == (
        "The MCP server 'missing' could not be started (the command '/nonexistent/server-binary' was not found)."
    )
    assert dies.sentence.startswith("The MCP server 'dies' could not be started")
    assert dies.sentence.endswith("It said: bad flag")
    assert fine.connected and not fine.sentence
    assert call_dead.outcome is CallOutcome.SERVER_FAILED and call_dead.sentence == dies.sentence
    assert call_fine.ok


def test_a_server_that_never_answers_is_a_sentence() -> None:
    mute = StdioServer("mute", sys.executable, ("-c", "import time; time.sleep(60)"))

    async def body(c: McpConnection) -> ServerStatus:
        return c.status

    start = time.monotonic()
    status = _with(mute, body, start_timeout=2)
    assert status == ServerStatus(
        "mute", False, (), "The MCP server 'mute' did not answer within 2 s."
    )
    assert time.monotonic() - start < 20
