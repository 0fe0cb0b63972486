"""Where the Hub is, where downloads go, and the user's Hub token.

The endpoint comes from, in order: an explicit argument, the saved setting
(``hub.json`` in the data folder), ``HF_ENDPOINT``, then https://huggingface.co. The token
is kept in the system keyring when the optional ``keyring`` package has a usable backend,
else in a file only the user can read (mode 0600); ``HF_TOKEN`` is used when none is
stored. The token is never logged, printed or put in an error message.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Any

from app import paths

DEFAULT_ENDPOINT = "https://huggingface.co"
_KEYRING_SERVICE = "LlamaDesk Hugging Face token"
_KEYRING_USER = "hub"


def _settings_file() -> Path:
    return paths.data_dir() / "hub.json"


def _load() -> dict[str, Any]:
    try:
        data = json.loads(_settings_file().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _save(data: dict[str, Any]) -> None:
    target = _settings_file()
    tmp = target.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(data, indent=2), encoding="utf-8")
    os.replace(tmp, target)


def endpoint(explicit: str | None = None) -> str:
    """The Hub address to use, without a trailing slash."""
    for value in (explicit, _load().get("endpoint"), os.environ.get("HF_ENDPOINT")):
        if isinstance(value, str) and value.strip():
            return value.strip().rstrip("/")
    return DEFAULT_ENDPOINT


def set_endpoint(value: str | None) -> None:
    """Save the Hub address (a mirror); None or "" goes back to HF_ENDPOINT / the Hub."""
    data = _load()
    if value and value.strip():
        if not value.strip().startswith(("http://", "https://")):
            from app.hub.errors import HubError

            raise HubError(f"The Hub address {value!r} must start with http:// or https://.")
        data["endpoint"] = value.strip().rstrip("/")
    else:
        data.pop("endpoint", None)
    _save(data)


def downloads_dir() -> Path:
    """Partial downloads (``NAME.part`` + ``NAME.part.json``), per repository."""
    path = paths.data_dir() / "downloads"
    path.mkdir(parents=True, exist_ok=True)
    return path


def library_dir() -> Path:
    """Where finished downloads land unless told otherwise (``<data dir>/models``)."""
    path = paths.data_dir() / "models"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _token_file() -> Path:
    return paths.data_dir() / "hub-token"


def _keyring() -> Any | None:
    """The keyring module if it is installed and has a real backend, else None."""
    try:
        import keyring  # type: ignore[import-not-found, unused-ignore]
        from keyring.backends import fail  # type: ignore[import-not-found, unused-ignore]
    except Exception:
        return None
    try:
        if isinstance(keyring.get_keyring(), fail.Keyring):
            return None
    except Exception:
        return None
    return keyring


class TokenStore:
    """The Hub token: ``get``, ``set``, ``clear``; ``where`` says where it is kept."""

    def __init__(self, *, use_keyring: bool = True) -> None:
        self._keyring = _keyring() if use_keyring else None

    @property
    def where(self) -> str:
        return "the system keyring" if self._keyring is not None else str(_token_file())

    def get(self) -> str | None:
        if self._keyring is not None:
            with contextlib.suppress(Exception):
                value = self._keyring.get_password(_KEYRING_SERVICE, _KEYRING_USER)
                if value:
                    return str(value)
        try:
            value = _token_file().read_text(encoding="utf-8").strip()
        except OSError:
            value = ""
        return value or os.environ.get("HF_TOKEN") or None

    def set(self, token: str) -> None:
        token = token.strip()
        if not token:
            self.clear()
            return
        if self._keyring is not None:
            try:
                self._keyring.set_password(_KEYRING_SERVICE, _KEYRING_USER, token)
                with contextlib.suppress(OSError):
                    _token_file().unlink()
                return
            except Exception:
                pass  # a locked or broken keyring: fall back to the private file
        path = _token_file()
        with contextlib.suppress(OSError):
            path.unlink()
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(token)
        os.chmod(path, 0o600)

    def clear(self) -> None:
        if self._keyring is not None:
            with contextlib.suppress(Exception):
                self._keyring.delete_password(_KEYRING_SERVICE, _KEYRING_USER)
        with contextlib.suppress(OSError):
            _token_file().unlink()
