"""The test MCP server: its script, a stdio configuration entry for it, and the server
itself over Streamable HTTP."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from app.mcp.config import StdioServer

SERVER_SCRIPT = Path(__file__).with_name("mcp_test_server.py")


def stdio_server(name: str = "test", *extra: str, env: dict[str, str] | None = None) -> StdioServer:
    return StdioServer(name, sys.executable, (str(SERVER_SCRIPT), "stdio", *extra), env or {})


@contextmanager
def http_test_server(address: str = "127.0.0.1") -> Iterator[str]:
    """The test MCP server over Streamable HTTP on a free port of ``address`` (a child
    process); yields its URL once it accepts connections."""
    with socket.socket() as s:
        s.bind((address, 0))
        port = int(s.getsockname()[1])
    child = subprocess.Popen(
        [sys.executable, str(SERVER_SCRIPT), "http", str(port), address],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection((address, port), timeout=0.5).close()
                break
            except OSError:
                if child.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("the test MCP server did not start") from None
                time.sleep(0.1)
        yield f"http://{address}:{port}/mcp"
    finally:
        child.terminate()
        try:
            child.wait(5)
        except subprocess.TimeoutExpired:  # uvicorn waits for open streams to close
            child.kill()
            child.wait(5)
