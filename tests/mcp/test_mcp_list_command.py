"""``llamadesk mcp list --config FILE [--json]`` in a subprocess, against the test server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.mcp.servers import SERVER_SCRIPT

pytestmark = pytest.mark.timeout(120)
ROOT = Path(__file__).resolve().parents[2]


def _run(*args: str, home: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "LLAMADESK_HOME": str(home)}
    return subprocess.run(
        [sys.executable, "-m", "app", "mcp", "list", *args],
        capture_output=True,
        text=True,
        timeout=100,
        env=env,
    )


def _config(tmp_path: Path, servers: dict[str, object]) -> Path:
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps({"mcpServers": servers}), encoding="utf-8")
    return path


def test_list_json_gives_the_stdio_server_s_tools(tmp_path: Path) -> None:
    config = _config(
        tmp_path, {"test": {"command": sys.executable, "args": [str(SERVER_SCRIPT), "stdio"]}}
    )
    done = _run("--config", str(config), "--json", home=tmp_path)
    assert done.returncode == 0, done.stderr
    (server,) = json.loads(done.stdout)["servers"]
    assert server["name"] == "test" and server["transport"] == "stdio" and server["connected"]
    tools = {t["name"]: t for t in server["tools"]}
    assert set(tools) == {"echo", "write_file", "sleep", "crash", "environment", "fail"}
    assert tools["echo"]["description"] == "Say the text back."
    assert tools["echo"]["input_schema"]["properties"]["text"]["type"] == "string"


def test_list_says_which_server_failed(tmp_path: Path) -> None:
    config = _config(
        tmp_path,
        {
            "test": {"command": sys.executable, "args": [str(SERVER_SCRIPT), "stdio"]},
            "gone": {"command": "/nonexistent/mcp-server"},
        },
    )
    done = _run("--config", str(config), home=tmp_path)
    assert done.returncode == 1
    assert "  echo: Say the text back." in done.stdout
    assert (
        "The MCP server 'gone' could not be started (the command '/nonexistent/mcp-server' was not found)."
        in (done.stdout)
    )
    assert "Traceback" not in done.stderr


def test_a_malformed_config_is_one_line_and_exit_2(tmp_path: Path) -> None:
    config = tmp_path / "mcp.json"
    config.write_text('{"mcpServers": {"a": {"url": 3}}}', encoding="utf-8")
    done = _run("--config", str(config), home=tmp_path)
    assert done.returncode == 2
    assert done.stderr.strip() == (
        f"llamadesk: The MCP configuration {config}: the MCP server 'a': 'url' must be an http:// or https:// address."
    )
