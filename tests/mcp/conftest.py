"""The test MCP server over Streamable HTTP: a child process on a free port of 127.0.0.1."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from app.mcp.config import HttpServer
from tests.mcp.servers import http_test_server


@pytest.fixture(scope="session")
def http_server() -> Iterator[HttpServer]:
    with http_test_server() as url:
        yield HttpServer("web", url)
