"""``mcp.json``: the MCP servers to connect, in the ``mcpServers`` shape LM Studio, Cursor
and Claude Desktop write, read as it is::

    {"mcpServers": {
        "files": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/tmp"],
                  "env": {"DEBUG": "1"}},
        "search": {"url": "https://example.com/mcp", "headers": {"Authorization": "Bearer ..."}}
    }}

A server on plain ``http://`` to another computer (anything but the loopback,
:mod:`app.loopback`) is not connected unless the user confirmed that the network is
trusted, as for remote engines: ``"llamadeskAllowInsecureHttp": true`` in its entry (the
window writes it when the user says yes), ``llamadesk mcp list --allow-insecure-http`` or
``llamadesk run --mcp-allow-insecure-http`` (:func:`insecure_http_refusal`).

A malformed file is refused whole with a sentence that names the place (nothing is
connected half-configured); keys this app does not use (``disabled``, ``type``,
``timeout`` ...) are kept out of the way, except ``disabled: true``, which leaves the
server out.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from app import paths
from app.errors import LlamaDeskError
from app.loopback import url_host_is_loopback

__all__ = [
    "ALLOW_INSECURE_KEY",
    "HttpServer",
    "McpConfig",
    "McpConfigError",
    "ServerConfig",
    "StdioServer",
    "insecure_http_refusal",
    "load_config",
    "parse_config",
]

ALLOW_INSECURE_KEY = "llamadeskAllowInsecureHttp"  # an entry's confirmation of plain http://

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
    allow_insecure_http: bool = False  # plain http:// to another computer was confirmed

    @property
    def binding(self) -> str:
        return "http:" + self.url

    @property
    def needs_confirmation(self) -> bool:
        """Plain ``http://`` to another computer, not confirmed: its headers (keys) and
        every tool call and result would travel unencrypted."""
        return (
            self.url.lower().startswith("http://")
            and not url_host_is_loopback(self.url)
            and not self.allow_insecure_http
        )


ServerConfig = StdioServer | HttpServer


@dataclass(frozen=True, slots=True)
class McpConfig:
    servers: tuple[ServerConfig, ...] = ()

    def server(self, name: str) -> ServerConfig | None:
        return next((s for s in self.servers if s.name == name), None)

    def allowing_insecure_http(self) -> McpConfig:
        """Every HTTP server with plain ``http://`` confirmed (the command line's flag)."""
        return McpConfig(
            tuple(
                replace(s, allow_insecure_http=True) if isinstance(s, HttpServer) else s
                for s in self.servers
            )
        )


def insecure_http_refusal(server: ServerConfig) -> str | None:
    """The sentence that keeps ``server`` from being connected over plain ``http://`` to
    another computer without the user's word (None: it may be connected)."""
    if not isinstance(server, HttpServer) or not server.needs_confirmation:
        return None
    return (
        f"The MCP server '{server.name}' is plain http:// to another computer ({server.url}): "
        "its headers (keys) and every tool call would travel unencrypted. Use https://, or "
        "confirm that this network is trusted: --mcp-allow-insecure-http (run), "
        f'--allow-insecure-http (mcp list), or "{ALLOW_INSECURE_KEY}": true in its entry '
        "in mcp.json."
    )


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
    allow = entry.get(ALLOW_INSECURE_KEY, False)
    if not isinstance(allow, bool):
        raise McpConfigError(f"{where}: '{ALLOW_INSECURE_KEY}' must be true or false.")
    headers = _string_map(entry.get("headers", {}), f"{where}: 'headers'")
    return HttpServer(name, url, headers, allow)


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
