"""An HTTP MCP server that is down, or that takes the connection and never answers, next to
a stdio server listed before it (issue 27, item 7): ``mcp list`` says one sentence for it
(no traceback), lists the other's tools, and ends within ``--timeout``; the connections
start together, each failing alone."""

from __future__ import annotations

import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from app.mcp.client import McpManager
from app.mcp.config import HttpServer, McpConfig
from tests.mcp.servers import SERVER_SCRIPT, stdio_server
from tests.mcp.test_mcp_list_command import _config, _run

pytestmark = pytest.mark.timeout(150)


@pytest.fixture
def closed_port() -> int:
    """A port nothing listens on (bound, then closed)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


@pytest.fixture
def mute_port() -> Iterator[int]:
    """A port that takes connections (the kernel's backlog) and never answers."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)
        yield sock.getsockname()[1]


def _servers(port: int) -> dict[str, object]:
    return {
        "local": {"command": sys.executable, "args": [str(SERVER_SCRIPT), "stdio"]},
        "remote": {"url": f"http://127.0.0.1:{port}/mcp"},
    }


def test_a_server_that_is_down_is_one_sentence(tmp_path: Path, closed_port: int) -> None:
    done = _run("--config", str(_config(tmp_path, _servers(closed_port))), home=tmp_path)
    assert done.returncode == 1
    assert "  echo: Say the text back." in done.stdout
    [line] = [x for x in done.stdout.splitlines() if "'remote'" in x]
    assert line.strip() == (
        "The MCP server 'remote' could not be started (All connection attempts failed)."
    )
    assert "Traceback" not in done.stderr and not done.stderr.strip(), done.stderr


def test_a_server_that_never_answers_ends_within_the_timeout(
    tmp_path: Path, mute_port: int
) -> None:
    config = _config(tmp_path, _servers(mute_port))
    started = time.monotonic()
    done = _run("--config", str(config), "--timeout", "4", home=tmp_path)
    took = time.monotonic() - started
    assert done.returncode == 1
    assert "  echo: Say the text back." in done.stdout
    assert "The MCP server 'remote' did not answer within 4 s." in done.stdout
    assert "Traceback" not in done.stderr
    # 4 s for the handshake, plus Python's and the stdio server's start on a busy machine;
    # the hang was 200 s.
    assert took < 60, took


def test_the_manager_keeps_the_servers_that_work(closed_port: int) -> None:
    """In-process: the down server's failure reaches neither the caller nor the other
    connection, which answers a call."""

    async def main() -> tuple[list[bool], str]:
        down = HttpServer("remote", f"http://127.0.0.1:{closed_port}/mcp")
        async with McpManager(McpConfig((stdio_server(), down)), start_timeout=30) as manager:
            result = await manager.call("test", "echo", {"text": "hi"})
            return [s.connected for s in manager.statuses], result.text

    connected, text = anyio.run(main)
    assert connected == [True, False] and text == "echo: hi"
