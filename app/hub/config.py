"""Where the Hub is, where downloads go, and the user's Hub token.

The endpoint comes from, in order: an explicit argument (``llamadesk pull --endpoint``),
``HF_ENDPOINT`` (what huggingface_hub itself honours: an environment variable is the
more deliberate choice), the Preferences' setting (``AppSettings.hub_endpoint`` in
``settings.json``, its one place), then https://huggingface.co. The token is kept in the
system keyring when the optional ``keyring`` package has a usable backend, else in a file
only the user can read (mode 0600); ``HF_TOKEN`` is used when none is stored. The token is
never logged, printed or put in an error message.
"""

from __future__ import annotations

import contextlib
import enum
import json
import os
from pathlib import Path

from app import paths
from app.fsutil import atomic_write_bytes
from app.keyring_backend import system_keyring
from app.storage.settings import endpoint_problem

DEFAULT_ENDPOINT = "https://huggingface.co"
_KEYRING_SERVICE = "LlamaDesk Hugging Face token"
_KEYRING_USER = "hub"


class EndpointSource(enum.Enum):
    """Where :func:`endpoint` found the address (the Preferences dialog says it)."""

    EXPLICIT = "explicit"
    ENVIRONMENT = "HF_ENDPOINT"
    SETTING = "setting"
    DEFAULT = "default"


def _clean(value: object) -> str | None:
    if isinstance(value, str) and value.strip():
        return value.strip().rstrip("/")
    return None


def env_endpoint() -> str | None:
    """``HF_ENDPOINT`` if it is set (and not empty)."""
    return _clean(os.environ.get("HF_ENDPOINT"))


def resolve_endpoint(explicit: str | None = None) -> tuple[str, EndpointSource]:
    """The Hub address to use, without a trailing slash, and where it came from."""
    if (value := _clean(explicit)) is not None:
        return value, EndpointSource.EXPLICIT
    if (value := env_endpoint()) is not None:
        return value, EndpointSource.ENVIRONMENT
    if (value := _clean(saved_endpoint())) is not None:
        return value, EndpointSource.SETTING
    return DEFAULT_ENDPOINT, EndpointSource.DEFAULT


def saved_endpoint() -> str:
    """``AppSettings.hub_endpoint`` as saved, read at each use (a small file) so that a
    change in Preferences applies to the next request. Read only: a damaged file is the
    app's :func:`~app.storage.settings.load_settings` to report and set aside, not this
    (which runs on download threads); an unusable value counts as unset."""
    try:
        data = json.loads(paths.settings_path().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return ""
    value = data.get("hub_endpoint") if isinstance(data, dict) else None
    if not isinstance(value, str) or endpoint_problem(value) is not None:
        return ""
    return value


def endpoint(explicit: str | None = None) -> str:
    """The Hub address to use, without a trailing slash (see :func:`resolve_endpoint`)."""
    return resolve_endpoint(explicit)[0]


def downloads_dir() -> Path:
    """Partial downloads (``NAME.part`` + ``NAME.part.json``), per repository."""
    return paths.private_dir("downloads")


def library_dir() -> Path:
    """Where finished downloads land unless told otherwise (``<data dir>/models``)."""
    path = paths.data_dir() / "models"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _token_file() -> Path:
    return paths.data_dir() / "hub-token"


class TokenStore:
    """The Hub token: ``get``, ``set``, ``clear``; ``where`` says where it is kept."""

    def __init__(self, *, use_keyring: bool = True) -> None:
        self._keyring = system_keyring() if use_keyring else None

    @property
    def where(self) -> str:
        return "the system keyring" if self._keyring is not None else str(_token_file())

    def get(self) -> str | None:
        """The saved token, else ``HF_TOKEN``, else None."""
        return self.saved() or os.environ.get("HF_TOKEN") or None

    def saved(self) -> str | None:
        """The token saved here (keyring or file), not ``HF_TOKEN``."""
        if self._keyring is not None:
            with contextlib.suppress(Exception):
                value = self._keyring.get_password(_KEYRING_SERVICE, _KEYRING_USER)
                if value:
                    return str(value)
        try:
            value = _token_file().read_text(encoding="utf-8").strip()
        except OSError:
            value = ""
        return value or None

    def has_saved(self) -> bool:
        return self.saved() is not None

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
        # Owner-only from the start (mkstemp), and replaced whole: a crash never leaves
        # the old token deleted and the new one unwritten.
        atomic_write_bytes(_token_file(), token.encode("utf-8"))

    def clear(self) -> None:
        if self._keyring is not None:
            with contextlib.suppress(Exception):
                self._keyring.delete_password(_KEYRING_SERVICE, _KEYRING_USER)
        with contextlib.suppress(OSError):
            _token_file().unlink()
