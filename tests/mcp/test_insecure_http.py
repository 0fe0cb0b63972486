"""An MCP server on plain ``http://`` to another computer needs the user's word, as a
remote engine does (issue 27 item 6): without it nothing is sent to it (not even the
handshake with its headers); ``mcp list --allow-insecure-http``,
``run --mcp-allow-insecure-http`` or ``"llamadeskAllowInsecureHttp": true`` give it. The
"other computer" is the real test server at this machine's own network address."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from app.mcp.client import McpConnection
from app.mcp.config import HttpServer, McpConfigError, insecure_http_refusal, parse_config
from tests.mcp.test_run_mcp import model as model
from tests.support.lan_mcp import lan_address, lan_mcp_server

pytestmark = pytest.mark.timeout(240)
ROOT = Path(__file__).resolve().parents[2]


def _server(url: str, **extra: object) -> HttpServer:
    (server,) = parse_config({"mcpServers": {"far": {"url": url, **extra}}}).servers
    assert isinstance(server, HttpServer)
    return server


def test_which_urls_need_the_confirmation() -> None:
    assert _server("http://10.0.0.2:9000/mcp").needs_confirmation
    assert _server("http://mcp.localhost:9000/mcp").needs_confirmation  # would need DNS
    assert not _server("https://10.0.0.2/mcp").needs_confirmation
    assert not _server("http://127.0.0.1:9000/mcp").needs_confirmation
    assert not _server("http://[::1]:9000/mcp").needs_confirmation
    allowed = _server("http://10.0.0.2:9000/mcp", llamadeskAllowInsecureHttp=True)
    assert allowed.allow_insecure_http and not allowed.needs_confirmation
    refusal = insecure_http_refusal(_server("http://10.0.0.2:9000/mcp"))
    assert refusal is not None and "--mcp-allow-insecure-http" in refusal
    with pytest.raises(McpConfigError, match="llamadeskAllowInsecureHttp' must be true or false"):
        _server("http://10.0.0.2/mcp", llamadeskAllowInsecureHttp="yes")


def test_nothing_is_sent_without_the_confirmation() -> None:
    address = lan_address()
    with socket.socket() as listener:
        listener.bind((address, 0))
        listener.listen()
        listener.settimeout(0.5)
        port = listener.getsockname()[1]
        server = HttpServer("far", f"http://{address}:{port}/mcp", {"Authorization": "Bearer k"})

        async def connect() -> str:
            async with McpConnection(server, start_timeout=5) as connection:
                assert not connection.status.connected
                return connection.status.sentence

        sentence = anyio.run(connect)
        assert "plain http:// to another computer" in sentence
        with pytest.raises(TimeoutError):
            listener.accept()  # no connection was even opened


def test_the_entry_s_key_lets_it_connect() -> None:
    with lan_mcp_server() as url:

        async def connect() -> bool:
            server = _server(url, llamadeskAllowInsecureHttp=True)
            async with McpConnection(server, start_timeout=30) as connection:
                return connection.status.connected and bool(connection.status.tools)

        assert anyio.run(connect)


def _cli(*args: str, home: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "LLAMADESK_HOME": str(home)}
    return subprocess.run(
        [sys.executable, "-m", "app", *args],
        capture_output=True,
        text=True,
        timeout=200,
        env=env,
        stdin=subprocess.DEVNULL,
    )


def test_mcp_list_asks_for_the_flag(tmp_path: Path) -> None:
    with lan_mcp_server() as url:
        config = tmp_path / "mcp.json"
        config.write_text(json.dumps({"mcpServers": {"far": {"url": url}}}), encoding="utf-8")
        refused = _cli("mcp", "list", "--config", str(config), "--json", home=tmp_path)
        assert refused.returncode == 1, refused.stderr
        (entry,) = json.loads(refused.stdout)["servers"]
        assert not entry["connected"] and "--allow-insecure-http" in entry["error"]
        allowed = _cli(
            "mcp", "list", "--config", str(config), "--json", "--allow-insecure-http", home=tmp_path
        )
        assert allowed.returncode == 0, allowed.stderr
        (entry,) = json.loads(allowed.stdout)["servers"]
        assert entry["connected"] and "echo" in {t["name"] for t in entry["tools"]}


def test_run_asks_for_the_flag(model: Path, tmp_path: Path) -> None:
    with lan_mcp_server() as url:
        config = tmp_path / "mcp.json"
        config.write_text(json.dumps({"mcpServers": {"far": {"url": url}}}), encoding="utf-8")
        flags = ["run", str(model), "say hello", "--mcp", str(config), "--temp", "0"]
        # environment() takes no arguments: the tiny model's call is always complete
        flags += ["-n", "64", "-c", "4096", "--max-rounds", "1", "--json"]
        flags += ["--allow", "environment", "--tool-choice", "environment"]
        refused = _cli(*flags, home=tmp_path / "home")
        assert refused.returncode == 2
        assert "plain http:// to another computer" in refused.stderr
        assert "'environment', which is not among the tools" in refused.stderr
        allowed = _cli(*flags, "--mcp-allow-insecure-http", home=tmp_path / "home")
        assert allowed.returncode == 0, allowed.stderr
        assert "plain http://" not in allowed.stderr
        [[call]] = json.loads(allowed.stdout)["rounds"][:1]
        assert (call["name"], call["server"], call["outcome"]) == ("environment", "far", "ok")


def test_the_flag_needs_mcp(model: Path, tmp_path: Path) -> None:
    done = _cli("run", str(model), "hi", "--mcp-allow-insecure-http", home=tmp_path)
    assert done.returncode != 0
    assert "--mcp-allow-insecure-http needs --mcp FILE" in done.stderr
