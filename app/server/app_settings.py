"""The in-app server's settings: ``server.json`` in the data folder.

Kept apart from the window's settings file (``settings.json``): the server's port, whether
other devices may connect, its API key and whether it starts with the app. The file is
written atomically and, as it holds the key, readable by its owner only (``mkstemp``
creates it so; the rename keeps it).
"""

from __future__ import annotations

import json
import secrets
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from app import paths
from app.fsutil import atomic_write_bytes

FILE_NAME = "server.json"
DEFAULT_PORT = 8080
KEY_BYTES = 24  # 32 URL-safe characters


@dataclass(frozen=True)
class ServerAppSettings:
    port: int = DEFAULT_PORT  # 0: any free port
    allow_other_devices: bool = False  # binds 0.0.0.0 (needs an API key)
    api_key: str = ""  # "" = none; when set, every client must send it
    start_with_app: bool = False

    @property
    def host(self) -> str:
        return "0.0.0.0" if self.allow_other_devices else "127.0.0.1"

    def problem(self) -> str | None:
        """Why the server cannot start with these settings (a sentence), or None."""
        if not 0 <= self.port <= 65535:
            return f"The port must be between 0 (any free port) and 65535, not {self.port}."
        if self.api_key != self.api_key.strip() or any(c.isspace() for c in self.api_key):
            return "The API key cannot contain spaces."
        if self.allow_other_devices and not self.api_key:
            return (
                "Allowing other devices needs an API key, or anyone on the network could use "
                "the model: press Generate key (or type one), then start the server."
            )
        return None


def generate_key() -> str:
    return "ld-" + secrets.token_urlsafe(KEY_BYTES)


def settings_file() -> Path:
    return paths.data_dir() / FILE_NAME


def load(path: Path | None = None) -> tuple[ServerAppSettings, str | None]:
    """The saved settings, or the defaults and a sentence when the file is unreadable
    (the damaged file stays until the settings are next saved)."""
    path = path if path is not None else settings_file()
    try:
        raw = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return ServerAppSettings(), None
    except OSError as exc:
        return ServerAppSettings(), (
            f"The server settings in {path} cannot be read ({exc.strerror or exc}); the "
            "defaults are used."
        )
    try:
        data = json.loads(raw)
    except (json.JSONDecodeError, RecursionError):
        data = None
    if not isinstance(data, dict):
        return ServerAppSettings(), (
            f"The server settings in {path} are damaged; the defaults are used until you "
            "change a setting."
        )
    return _from_dict(data), None


def _from_dict(data: dict[str, Any]) -> ServerAppSettings:
    """Known fields of the right type; anything else keeps its default."""
    default = ServerAppSettings()
    port = data.get("port")
    allow = data.get("allow_other_devices")
    start = data.get("start_with_app")
    key = data.get("api_key")
    return ServerAppSettings(
        port=port
        if isinstance(port, int) and not isinstance(port, bool) and 0 <= port <= 65535
        else default.port,
        allow_other_devices=allow if isinstance(allow, bool) else default.allow_other_devices,
        api_key=key if isinstance(key, str) else default.api_key,
        start_with_app=start if isinstance(start, bool) else default.start_with_app,
    )


def save(settings: ServerAppSettings, path: Path | None = None) -> None:
    path = path if path is not None else settings_file()
    data = json.dumps(asdict(settings), indent=2).encode("utf-8")
    atomic_write_bytes(path, data)
