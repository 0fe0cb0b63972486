"""The app's own MCP servers (Qt-free): the ``mcp.json`` in the data folder, and their
secrets, which never go into that file.

The file keeps the ``mcpServers`` shape LM Studio, Cursor and Claude write (so
``llamadesk mcp list`` and other apps read it), with two additions: ``disabled: true`` for
a server switched off (the shape's own key) and ``llamadeskSecrets``: the names of the
environment variables and headers whose values are in the :class:`SecretStore` (the
system keyring, else a file only the user can read). A secret's value is left out of the
file entirely, so a server that needs it is connected with :func:`resolved`.

Which values are secrets: the user says per row when adding a server; an imported file's
values are judged by name (:func:`looks_secret`: ``API_KEY``, ``Authorization`` ...), the
same rule the add form starts from. Keys this app does not use are kept as they were.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Final

from app import paths
from app.errors import LlamaDeskError
from app.fsutil import atomic_write_bytes
from app.keyring_backend import system_keyring
from app.mcp.config import (
    ALLOW_INSECURE_KEY,
    HttpServer,
    McpConfig,
    McpConfigError,
    ServerConfig,
    StdioServer,
    default_config_path,
    load_config,
    parse_config,
)

__all__ = [
    "SECRETS_KEY",
    "McpStore",
    "SecretStore",
    "ServerEntry",
    "looks_secret",
    "resolved",
]

SECRETS_KEY: Final = "llamadeskSecrets"
_KEYRING_SERVICE: Final = "LlamaDesk MCP"
# A word of the name that marks its value as a secret (split at _ - and case changes).
_SECRET_WORDS: Final = frozenset(
    {"key", "token", "secret", "password", "passwd", "pass", "auth", "authorization",
     "credential", "credentials", "cookie", "apikey", "pat", "bearer", "session"}
)  # fmt: skip


def looks_secret(name: str) -> bool:
    """Whether a variable or header called ``name`` likely holds a secret."""
    spaced = re.sub(r"([a-z])([A-Z])", r"\1 \2", name)
    words = {w.lower() for w in re.split(r"[^A-Za-z0-9]+", spaced) if w}
    return bool(words & _SECRET_WORDS) or "apikey" in name.lower().replace("-", "").replace("_", "")


class McpStoreError(LlamaDeskError):
    """The app's MCP servers cannot be read or written (the message says why)."""


@dataclass(frozen=True, slots=True)
class ServerEntry:
    """One configured server. ``server`` holds no secret value (see :func:`resolved`)."""

    server: ServerConfig
    enabled: bool = True
    secret_names: tuple[str, ...] = ()  # env names (stdio) or header names (HTTP)
    extra: Mapping[str, Any] = field(default_factory=dict)  # keys this app does not use

    @property
    def name(self) -> str:
        return self.server.name

    @property
    def kind(self) -> str:
        return "stdio" if isinstance(self.server, StdioServer) else "HTTP"

    @property
    def summary(self) -> str:
        """What it runs or reaches, for a list."""
        s = self.server
        if isinstance(s, StdioServer):
            return " ".join([s.command, *s.args])
        return s.url


def _secret_user(server: str, name: str) -> str:
    return f"{server}\n{name}"


class SecretStore:
    """Secret values of MCP servers, by server and variable/header name: in the system
    keyring, else in ``mcp-secrets.json`` (owner-only) in the data folder. May block (a
    keyring waits for an unlock): use it off the GUI thread."""

    def __init__(self, *, use_keyring: bool = True, path: Path | None = None) -> None:
        self._keyring = system_keyring() if use_keyring else None
        self._path = path or paths.data_dir() / "mcp-secrets.json"

    @property
    def where(self) -> str:
        return "the system keyring" if self._keyring is not None else str(self._path)

    def _file(self) -> dict[str, str]:
        try:
            data = json.loads(self._path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return (
            {k: v for k, v in data.items() if isinstance(v, str)} if isinstance(data, dict) else {}
        )

    def _write_file(self, data: Mapping[str, str]) -> None:
        atomic_write_bytes(self._path, json.dumps(dict(data), indent=1).encode("utf-8"))

    def get(self, server: str, name: str) -> str | None:
        user = _secret_user(server, name)
        if self._keyring is not None:
            with contextlib.suppress(Exception):
                value = self._keyring.get_password(_KEYRING_SERVICE, user)
                if value is not None:
                    return str(value)
        return self._file().get(user)

    def set(self, server: str, name: str, value: str) -> None:
        user = _secret_user(server, name)
        if self._keyring is not None:
            try:
                self._keyring.set_password(_KEYRING_SERVICE, user, value)
                return
            except Exception:
                pass  # a locked or broken keyring: the private file
        data = self._file()
        data[user] = value
        self._write_file(data)

    def delete(self, server: str, name: str) -> None:
        user = _secret_user(server, name)
        if self._keyring is not None:
            with contextlib.suppress(Exception):
                self._keyring.delete_password(_KEYRING_SERVICE, user)
        data = self._file()
        if data.pop(user, None) is not None:
            self._write_file(data)


def resolved(entry: ServerEntry, secrets: SecretStore) -> tuple[ServerConfig, list[str]]:
    """The server as it is connected (its secret values put back), and the names of the
    secrets that are missing from the store."""
    missing: list[str] = []
    values: dict[str, str] = {}
    for name in entry.secret_names:
        value = secrets.get(entry.name, name)
        if value is None:
            missing.append(name)
        else:
            values[name] = value
    s = entry.server
    if isinstance(s, StdioServer):
        return replace(s, env={**s.env, **values}), missing
    return replace(s, headers={**s.headers, **values}), missing


def _entry_json(entry: ServerEntry) -> dict[str, Any]:
    data: dict[str, Any] = dict(entry.extra)
    s = entry.server
    if isinstance(s, StdioServer):
        data["command"] = s.command
        if s.args:
            data["args"] = list(s.args)
        if s.env:
            data["env"] = dict(s.env)
        if s.cwd is not None:
            data["cwd"] = s.cwd
    else:
        data["url"] = s.url
        if s.headers:
            data["headers"] = dict(s.headers)
        if s.allow_insecure_http:
            data[ALLOW_INSECURE_KEY] = True
    if entry.secret_names:
        data[SECRETS_KEY] = list(entry.secret_names)
    if not entry.enabled:
        data["disabled"] = True
    return data


_OWN_KEYS: Final = frozenset(
    {"command", "args", "env", "cwd", "url", "headers", "disabled", SECRETS_KEY, ALLOW_INSECURE_KEY}
)


def _entry(name: str, raw: Any, source: str) -> ServerEntry:
    if not isinstance(raw, dict):
        parse_config({"mcpServers": {name: raw}}, source)  # raises with its sentence
        raise McpConfigError(f"{source}: the server '{name}' is not an object.")
    enabled = raw.get("disabled") is not True
    secret_names = raw.get(SECRETS_KEY, [])
    if not isinstance(secret_names, list) or not all(isinstance(n, str) for n in secret_names):
        raise McpConfigError(
            f"{source}: '{SECRETS_KEY}' of the server '{name}' must be a list of names."
        )
    plain = {k: v for k, v in raw.items() if k not in ("disabled", SECRETS_KEY)}
    config = parse_config({"mcpServers": {name: plain}}, source)
    (server,) = config.servers
    extra = {k: v for k, v in raw.items() if k not in _OWN_KEYS}
    return ServerEntry(server, enabled, tuple(secret_names), extra)


def _split_secrets(
    server: ServerConfig, secret: Iterable[str]
) -> tuple[ServerConfig, dict[str, str]]:
    """The server without the values named in ``secret``, and those values."""
    names = set(secret)
    values = dict(server.env) if isinstance(server, StdioServer) else dict(server.headers)
    taken = {k: v for k, v in values.items() if k in names}
    kept = {k: v for k, v in values.items() if k not in names}
    if isinstance(server, StdioServer):
        return replace(server, env=kept), taken
    return replace(server, headers=kept), taken


class McpStore:
    """The app's servers in ``path`` (default: the data folder's ``mcp.json``); every
    method reads or writes the file at once (small), so it is one source of truth for the
    window, the chat and ``llamadesk mcp list``. Blocking I/O: off the GUI thread."""

    def __init__(self, path: Path | None = None, secrets: SecretStore | None = None) -> None:
        self.path = path or default_config_path()
        self.secrets = secrets or SecretStore()

    def entries(self) -> list[ServerEntry]:
        """The servers (disabled ones too); :class:`McpConfigError` with a sentence when
        the file cannot be used (nothing is then connected)."""
        if not self.path.exists():
            return []
        load_config(self.path)  # the file's own checks (size, UTF-8, JSON, shape)
        data = json.loads(self.path.read_text(encoding="utf-8"))
        source = f"The MCP configuration {self.path}"
        return [_entry(name, raw, source) for name, raw in data["mcpServers"].items()]

    def _write(self, entries: Iterable[ServerEntry]) -> None:
        data = {"mcpServers": {e.name: _entry_json(e) for e in entries}}
        try:
            atomic_write_bytes(self.path, (json.dumps(data, indent=2) + "\n").encode("utf-8"))
        except OSError as exc:
            raise McpStoreError(
                f"The MCP servers could not be saved in {self.path}: {exc.strerror or exc}."
            ) from None

    def put(
        self,
        server: ServerConfig,
        secret_names: Iterable[str] = (),
        enabled: bool = True,
        extra: Mapping[str, Any] | None = None,
    ) -> ServerEntry:
        """Add ``server`` (or replace the one of its name): the values named in
        ``secret_names`` go to the secret store, the rest to the file."""
        entries = self.entries()
        old = next((e for e in entries if e.name == server.name), None)
        bare, taken = _split_secrets(server, secret_names)
        for name, value in taken.items():
            self.secrets.set(server.name, name, value)
        if old is not None:
            for name in set(old.secret_names) - set(taken):
                self.secrets.delete(server.name, name)
        if extra is None:
            extra = old.extra if old is not None else {}
        entry = ServerEntry(bare, enabled, tuple(sorted(taken)), extra)
        self._write(
            [entry if e.name == server.name else e for e in entries] if old else [*entries, entry]
        )
        return entry

    def set_enabled(self, name: str, enabled: bool) -> None:
        entries = self.entries()
        self._write([replace(e, enabled=enabled) if e.name == name else e for e in entries])

    def allow_insecure_http(self, name: str) -> None:
        """Record that the user confirmed plain ``http://`` to another computer for the
        HTTP server ``name`` (its secrets stay where they are)."""
        entries = self.entries()
        self._write(
            [
                replace(e, server=replace(e.server, allow_insecure_http=True))
                if e.name == name and isinstance(e.server, HttpServer)
                else e
                for e in entries
            ]
        )

    def remove(self, name: str) -> None:
        entries = self.entries()
        for entry in entries:
            if entry.name == name:
                for secret in entry.secret_names:
                    self.secrets.delete(name, secret)
        self._write([e for e in entries if e.name != name])

    def import_file(self, path: Path) -> tuple[list[str], int]:
        """Add the servers of another app's ``mcp.json`` as it is (servers of the same
        name are replaced; disabled ones come disabled); values that look like secrets go
        to the secret store. Returns the names imported and the number of secrets moved."""
        load_config(path)  # the whole file is checked first: nothing half-imported
        data = json.loads(path.read_text(encoding="utf-8"))
        source = f"The MCP configuration {path}"
        imported = [_entry(name, raw, source) for name, raw in data["mcpServers"].items()]
        moved = 0
        for entry in imported:
            values = (
                entry.server.env if isinstance(entry.server, StdioServer) else entry.server.headers
            )
            secret = [k for k in values if looks_secret(k)]
            moved += len(secret)
            self.put(entry.server, secret, entry.enabled, entry.extra)
        return [e.name for e in imported], moved

    def config(self) -> tuple[McpConfig, list[str]]:
        """The enabled servers as they are connected (secrets put back), and a sentence
        for each one left out because a secret is missing."""
        servers: list[ServerConfig] = []
        problems: list[str] = []
        for entry in self.entries():
            if not entry.enabled:
                continue
            server, missing = resolved(entry, self.secrets)
            if missing:
                problems.append(
                    f"The MCP server '{entry.name}' is left out: its secret "
                    f"{', '.join(missing)} is not in {self.secrets.where}; add the server again."
                )
                continue
            servers.append(server)
        return McpConfig(tuple(servers)), problems


def http_server(name: str, url: str, headers: Mapping[str, str]) -> HttpServer:
    """An HTTP server checked as a file's entry would be (:class:`McpConfigError`)."""
    (server,) = parse_config({"mcpServers": {name: {"url": url, "headers": dict(headers)}}}).servers
    assert isinstance(server, HttpServer)
    return server


def stdio_server(
    name: str, command: str, args: Iterable[str], env: Mapping[str, str]
) -> StdioServer:
    """A stdio server checked as a file's entry would be (:class:`McpConfigError`)."""
    entry = {"command": command, "args": list(args), "env": dict(env)}
    (server,) = parse_config({"mcpServers": {name: entry}}).servers
    assert isinstance(server, StdioServer)
    return server
