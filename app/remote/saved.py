"""The window's remote connections: what is saved of each, and the address of a remote model.

A :class:`SavedConnection` is what Preferences ▸ Engines keeps in the app settings
(``AppSettings.remote_connections``, a JSON list: the one place they live): its name, the
server's URL, whether plain ``http://`` to another computer was confirmed, and what the
last test found (the server's kind, its models, its context size). The API key is never
in it: :class:`ApiKeys` keeps it in the system keyring, or, where there is none (or it
refuses), in ``remote-keys.json`` in the data folder, readable only by the user (0600) -
as the Hugging Face token (``hub-token``) and the MCP servers' secrets
(``mcp-secrets.json``) are kept.

A remote model is loaded by its *address*, ``remote://<connection id>/<model name>``
(:func:`address`, :func:`parse_address`): what the session loads, the conversation
records and the picker lists beside the local files' paths.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import re
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote, urlsplit

from app import paths
from app.fsutil import atomic_write_bytes
from app.keyring_backend import system_keyring
from app.loopback import is_loopback_host
from app.remote.connection import RemoteConnection

log = logging.getLogger(__name__)

SCHEME = "remote://"
KEYRING_SERVICE = "LlamaDesk remote engine key"
KEYS_FILE = "remote-keys.json"  # in the data folder, owner-only: where there is no keyring
MAX_NAME = 60


@dataclass(frozen=True)
class SavedConnection:
    """See the module docstring. ``id`` is stable (the addresses of its models use it);
    ``name`` is what the window shows ("gpu-box")."""

    id: str
    name: str
    url: str
    allow_insecure: bool = False  # plain http:// to another computer, confirmed once
    has_key: bool = False  # an API key is kept for it (in the keyring or the keys file)
    kind: str = ""  # the server's kind at the last test ("llama-server"; "": not tested)
    version: str = ""
    models: tuple[str, ...] = field(default_factory=tuple)
    n_ctx: int = 0  # context per conversation at the last test (0: not said)

    @property
    def needs_confirmation(self) -> bool:
        """Plain ``http://`` to another computer that was not confirmed yet."""
        parts = urlsplit(self.url.strip())
        return (
            parts.scheme == "http"
            and not is_loopback_host(parts.hostname or "")
            and not self.allow_insecure
        )

    def connection(self, api_key: str | None, model: str | None = None) -> RemoteConnection:
        return RemoteConnection(self.url, api_key, model, allow_insecure=self.allow_insecure)

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "url": self.url,
            "allow_insecure": self.allow_insecure,
            "has_key": self.has_key,
            "kind": self.kind,
            "version": self.version,
            "models": list(self.models),
            "n_ctx": self.n_ctx,
        }

    @classmethod
    def from_json(cls, data: Any) -> SavedConnection | None:
        """None for an entry that is not one (logged; the others still load)."""
        if not isinstance(data, Mapping):
            log.warning("A saved remote connection is not an object: %.80r; ignored", data)
            return None
        cid, name, url = data.get("id"), data.get("name"), data.get("url")
        if not all(isinstance(v, str) and v for v in (cid, name, url)):
            log.warning("A saved remote connection lacks its id, name or URL; ignored")
            return None
        assert isinstance(cid, str) and isinstance(name, str) and isinstance(url, str)
        models = data.get("models")
        n_ctx = data.get("n_ctx")
        return cls(
            id=cid,
            name=name,
            url=url,
            allow_insecure=data.get("allow_insecure") is True,
            has_key=data.get("has_key") is True,
            kind=str(data.get("kind") or ""),
            version=str(data.get("version") or ""),
            models=tuple(m for m in models if isinstance(m, str))
            if isinstance(models, list)
            else (),
            n_ctx=n_ctx if isinstance(n_ctx, int) and not isinstance(n_ctx, bool) else 0,
        )


def load_connections(raw: Iterable[Any]) -> tuple[SavedConnection, ...]:
    """The saved connections of the settings' list (entries that are none are skipped)."""
    out: list[SavedConnection] = []
    seen: set[str] = set()
    for item in raw:
        conn = SavedConnection.from_json(item)
        if conn is not None and conn.id not in seen:
            seen.add(conn.id)
            out.append(conn)
    return tuple(out)


def dump_connections(conns: Iterable[SavedConnection]) -> list[dict[str, Any]]:
    return [c.to_json() for c in conns]


def new_id(name: str, taken: Iterable[str]) -> str:
    """A stable id for a new connection named ``name`` (letters, digits and dashes)."""
    base = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")[:32] or "server"
    taken = set(taken)
    cid, n = base, 2
    while cid in taken:
        cid, n = f"{base}-{n}", n + 1
    return cid


def check_new(name: str, url: str, existing: Iterable[SavedConnection]) -> str | None:
    """The sentence that refuses a new connection (None: it can be added)."""
    name = name.strip()
    if not name:
        return "Give the connection a name (e.g. gpu-box)."
    if len(name) > MAX_NAME:
        return f"The name is longer than {MAX_NAME} characters."
    if any(c.name.lower() == name.lower() for c in existing):
        return f"There is a connection named {name!r} already."
    try:
        RemoteConnection(url, allow_insecure=True).validate()
    except Exception as exc:  # RemoteConnectionError: its sentence
        return str(exc)
    return None


def with_probe(
    conn: SavedConnection, kind: str, version: str, models: Iterable[str], n_ctx: int | None
) -> SavedConnection:
    """``conn`` with what a test found."""
    return replace(conn, kind=kind, version=version, models=tuple(models), n_ctx=n_ctx or 0)


# ---------------------------------------------------------------- addresses


def address(connection_id: str, model: str) -> str:
    """The address of ``model`` on the connection (see the module docstring)."""
    return f"{SCHEME}{connection_id}/{quote(model, safe='')}"


def parse_address(path: str) -> tuple[str, str] | None:
    """(connection id, model name) of a remote model's address; None for anything else."""
    if not path.startswith(SCHEME):
        return None
    cid, sep, model = path[len(SCHEME) :].partition("/")
    if not cid or not sep:
        return None
    return cid, unquote(model)


def is_address(path: str | None) -> bool:
    return path is not None and parse_address(path) is not None


# ---------------------------------------------------------------- API keys


@functools.cache
def default_keys() -> ApiKeys:
    """The process's one key store (the window's Engines page and its loader share it)."""
    return ApiKeys()


class ApiKeys:
    """The connections' API keys: the system keyring, else ``remote-keys.json`` in the
    data folder (owner-only; see the module docstring). Thread-safe; the keyring may take
    a moment, so the window calls it off the GUI thread."""

    def __init__(self, *, use_keyring: bool = True, path: Path | None = None) -> None:
        self._keyring = system_keyring() if use_keyring else None
        self._path = path  # None: the data folder's, found when first needed
        self._lock = threading.Lock()

    @property
    def path(self) -> Path:
        return self._path or paths.data_dir() / KEYS_FILE

    @property
    def persistent(self) -> bool:
        """Kept across restarts (always: the keyring, else the owner-only file)."""
        return True

    def where(self) -> str:
        if self._keyring is not None:
            return "the system keyring"
        return f"{self.path}, readable only by you (there is no system keyring here)"

    def _file(self) -> dict[str, str]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        if not isinstance(data, dict):
            return {}
        return {k: v for k, v in data.items() if isinstance(v, str) and v}

    def _write_file(self, data: Mapping[str, str]) -> None:
        atomic_write_bytes(self.path, json.dumps(dict(data), indent=1).encode("utf-8"))

    def get(self, connection_id: str) -> str | None:
        # The file first: a key is there only when the keyring refused it (set), so it is
        # newer than any the keyring still holds for this connection.
        with self._lock:
            value = self._file().get(connection_id)
        if value is not None:
            return value
        if self._keyring is not None:
            try:
                value = self._keyring.get_password(KEYRING_SERVICE, connection_id)
            except Exception as exc:
                log.warning("The keyring could not be read: %s", type(exc).__name__)
            else:
                if isinstance(value, str) and value:
                    return value
        return None

    def set(self, connection_id: str, key: str) -> None:
        if self._keyring is not None:
            try:
                self._keyring.set_password(KEYRING_SERVICE, connection_id, key)
            except Exception as exc:  # a locked keyring: the owner-only file
                log.warning("The keyring refused the key: %s", type(exc).__name__)
                with contextlib.suppress(Exception):  # an older key there is wrong now
                    self._keyring.delete_password(KEYRING_SERVICE, connection_id)
            else:
                self._drop_from_file(connection_id)  # one place per key
                return
        with self._lock:
            data = self._file()
            data[connection_id] = key
            self._write_file(data)

    def delete(self, connection_id: str) -> None:
        self._drop_from_file(connection_id)
        if self._keyring is not None:
            try:
                self._keyring.delete_password(KEYRING_SERVICE, connection_id)
            except Exception:
                pass  # there was none

    def _drop_from_file(self, connection_id: str) -> None:
        with self._lock:
            data = self._file()
            if data.pop(connection_id, None) is not None:
                self._write_file(data)
