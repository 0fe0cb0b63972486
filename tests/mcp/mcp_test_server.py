"""An MCP server for the tests, on the SDK's MCPServer: ``python mcp_test_server.py stdio``
or ``python mcp_test_server.py http PORT``.

Tools: ``echo`` (harmless), ``write_file`` (writes a file: approval matters), ``sleep``
(for timeouts and cancelling), ``crash`` (the process dies mid-call), ``environment``
(the names of the variables the server was given).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from mcp.server.mcpserver import MCPServer

server = MCPServer("llamadesk-test")


@server.tool()
def echo(text: str) -> str:
    """Say the text back."""
    return f"echo: {text}"


@server.tool()
def write_file(path: str, text: str) -> str:
    """Write text into a file."""
    Path(path).write_text(text, encoding="utf-8")
    return f"wrote {len(text)} characters"


@server.tool()
def sleep(seconds: float) -> str:
    """Sleep, then say so."""
    time.sleep(seconds)
    return "slept"


@server.tool()
def crash() -> str:
    """Die without answering."""
    os._exit(3)


@server.tool()
def environment() -> list[str]:
    """The names of the environment variables."""
    return sorted(os.environ)


@server.tool()
def fail(reason: str) -> str:
    """Raise an error."""
    raise ValueError(reason)


if __name__ == "__main__":
    if sys.argv[1] == "http":
        host = sys.argv[3] if len(sys.argv) > 3 else "127.0.0.1"
        server.run("streamable-http", host=host, port=int(sys.argv[2]))
    else:
        server.run()
