"""``mcp.json``: the MCP servers to connect, in the ``mcpServers`` shape LM Studio, Cursor
and Claude Desktop write, read as it is::

    {"mcpServers": {
        "files": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/tmp"],
                  "env": {"DEBUG": "1"}},
        "search": {"url": "https://example.com/mcp", "headers": {"Authorization": "Bearer ..."}}
    }}

A malformed file is refused whole with a sentence that names the place (nothing is
connected half-configured); keys this app does not use (``disabled``, ``type``,
``timeout`` ...) are kept out of the way, except ``disabled: true``, which leaves the
server out.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app import paths
from app.errors import LlamaDeskError

__all__ = [
    "HttpServer",
    "McpConfig",
    "McpConfigError",
    "ServerConfig",
    "StdioServer",
    "load_config",
    "parse_config",
]

MAX_CONFIG_BYTES = 1_000_000


def default_config_path() -> Path:
    """The app's own ``mcp.json``, in the data folder."""
    return paths.data_dir() / "mcp.json"


class McpConfigError(LlamaDeskError):
    """The MCP configuration cannot be used (the message says where and why)."""


@dataclass(frozen=True, slots=True)
class StdioServer:
    """A server the app starts as a child process and talks to over stdin/stdout."""

    name: str
    command: str
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: str | None = None

    @property
    def binding(self) -> str:
        """What a permission is bound to: the command line (changing it drops them)."""
        return "stdio:" + json.dumps([self.command, *self.args])


@dataclass(frozen=True, slots=True)
class HttpServer:
    """A server reached over Streamable HTTP."""

    name: str
    url: str
    headers: Mapping[str, str] = field(default_factory=dict)

    @property
    def binding(self) -> str:
        return "http:" + self.url


ServerConfig = StdioServer | HttpServer


@dataclass(frozen=True, slots=True)
class McpConfig:
    servers: tuple[ServerConfig, ...] = ()

    def server(self, name: str) -> ServerConfig | None:
        return next((s for s in self.servers if s.name == name), None)


def _strings(value: Any, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise McpConfigError(f"{where} must be a list of strings.")
    return tuple(value)


def _string_map(value: Any, where: str) -> dict[str, str]:
    if not isinstance(value, dict):
        raise McpConfigError(f"{where} must be an object of strings.")
    out: dict[str, str] = {}
    for key, item in value.items():
        if not isinstance(item, str):
            raise McpConfigError(f"{where}: the value of '{key}' must be a string.")
        out[key] = item
    return out


def _server(name: str, entry: Any) -> ServerConfig | None:
    where = f"The MCP server '{name}'"
    if not isinstance(entry, dict):
        raise McpConfigError(f"{where} must be an object with a 'command' or a 'url'.")
    if entry.get("disabled") is True:
        return None
    has_command, has_url = "command" in entry, "url" in entry
    if has_command == has_url:
        raise McpConfigError(
            f"{where} needs either a 'command' (stdio) or a 'url' (HTTP), not both or neither."
        )
    if has_command:
        command = entry["command"]
        if not isinstance(command, str) or not command.strip():
            raise McpConfigError(f"{where}: 'command' must be a non-empty string.")
        cwd = entry.get("cwd")
        if cwd is not None and not isinstance(cwd, str):
            raise McpConfigError(f"{where}: 'cwd' must be a string.")
        return StdioServer(
            name,
            command,
            _strings(entry.get("args", []), f"{where}: 'args'"),
            _string_map(entry.get("env", {}), f"{where}: 'env'"),
            cwd,
        )
    url = entry["url"]
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise McpConfigError(f"{where}: 'url' must be an http:// or https:// address.")
    return HttpServer(name, url, _string_map(entry.get("headers", {}), f"{where}: 'headers'"))


def parse_config(data: Any, source: str = "The MCP configuration") -> McpConfig:
    """The configuration from the JSON value of an ``mcp.json``."""
    if not isinstance(data, dict) or not isinstance(data.get("mcpServers"), dict):
        raise McpConfigError(f"{source} must be a JSON object with an 'mcpServers' object.")
    servers = []
    for name, entry in data["mcpServers"].items():
        if not name.strip():
            raise McpConfigError(f"{source} has a server with an empty name.")
        try:
            server = _server(name, entry)
        except McpConfigError as exc:
            said = str(exc)
            raise McpConfigError(f"{source}: {said[0].lower()}{said[1:]}") from None
        if server is not None:
            servers.append(server)
    return McpConfig(tuple(servers))


def load_config(path: Path) -> McpConfig:
    """Read an ``mcp.json`` (:class:`McpConfigError` with a sentence when it cannot be used)."""
    try:
        size = path.stat().st_size
        if size > MAX_CONFIG_BYTES:
            raise McpConfigError(f"The MCP configuration {path} is too large ({size:,} bytes).")
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise McpConfigError(f"The MCP configuration {path} does not exist.") from None
    except UnicodeDecodeError:
        raise McpConfigError(f"The MCP configuration {path} is not UTF-8 text.") from None
    except OSError as exc:
        raise McpConfigError(
            f"The MCP configuration {path} cannot be read: {exc.strerror or exc}."
        ) from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise McpConfigError(
            f"The MCP configuration {path} is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})."
        ) from None
    return parse_config(data, f"The MCP configuration {path}")
