"""The test MCP server: its script, and a stdio configuration entry for it."""

from __future__ import annotations

import sys
from pathlib import Path

from app.mcp.config import StdioServer

SERVER_SCRIPT = Path(__file__).with_name("mcp_test_server.py")


def stdio_server(name: str = "test", *extra: str, env: dict[str, str] | None = None) -> StdioServer:
    return StdioServer(name, sys.executable, (str(SERVER_SCRIPT), "stdio", *extra), env or {})
