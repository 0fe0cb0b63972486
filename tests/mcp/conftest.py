"""The test MCP server over Streamable HTTP: a child process on a free port of 127.0.0.1."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from app.mcp.config import HttpServer
from tests.mcp.servers import SERVER_SCRIPT


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="session")
def http_server() -> Iterator[HttpServer]:
    port = _free_port()
    child = subprocess.Popen(
        [sys.executable, str(SERVER_SCRIPT), "http", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                if child.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("the test MCP server did not start") from None
                time.sleep(0.1)
        yield HttpServer("web", f"http://127.0.0.1:{port}/mcp")
    finally:
        child.terminate()
        try:
            child.wait(5)
        except subprocess.TimeoutExpired:  # uvicorn waits for open streams to close
            child.kill()
            child.wait(5)
