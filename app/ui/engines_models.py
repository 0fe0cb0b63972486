"""The window's side of remote engines: its loader, the picker's remote models, the tabs'
"on gpu-box · llama-server".

- :func:`window_loader`: the session's loader in the window (local files and the saved
  connections' models, :class:`~app.remote.router.EngineRouter`), reading the
  connections from the window's one :class:`~app.storage.AppSettings` at each load.
- :class:`EnginesPicker`: the model picker, with each connection's models (as its last
  test listed them) after the local ones; choosing one loads its ``remote://`` address.
- :func:`engine_note`: which machine answers a tab's conversation, for its status line.
"""

from __future__ import annotations

from PySide6.QtWidgets import QWidget

from app.remote.router import EngineRouter
from app.remote.saved import (
    SavedConnection,
    address,
    default_keys,
    load_connections,
    parse_address,
)
from app.session import LoadedModel
from app.storage import AppSettings, Database
from app.ui.model_picker import ModelPicker, PickerEntry


def connections_of(settings: AppSettings) -> tuple[SavedConnection, ...]:
    return load_connections(settings.remote_connections)


def window_loader(settings: AppSettings) -> EngineRouter:
    """The loader of the window whose settings are ``settings`` (see the module docstring)."""
    from app.offload_loader import OffloadLoader  # local files: remote devices in a child

    return EngineRouter(lambda: connections_of(settings), default_keys(), OffloadLoader())


def connection_of(settings: AppSettings, path: str | None) -> SavedConnection | None:
    """The saved connection whose model ``path`` is (None: a local file, or one removed)."""
    parsed = parse_address(path) if path else None
    if parsed is None:
        return None
    return next((c for c in connections_of(settings) if c.id == parsed[0]), None)


def remote_entries(settings: AppSettings) -> list[PickerEntry]:
    """Each connection's models, as its last test listed them."""
    out: list[PickerEntry] = []
    for conn in connections_of(settings):
        usable = not conn.needs_confirmation
        if not conn.models:
            out.append(
                PickerEntry(
                    f"{conn.name}: no models known (test it in Preferences ▸ Engines)",
                    address(conn.id, ""),
                    False,
                )
            )
        for model in conn.models:
            kind = f" ({conn.kind})" if conn.kind else ""
            out.append(
                PickerEntry(f"{model} · on {conn.name}{kind}", address(conn.id, model), usable)
            )
    return out


class EnginesPicker(ModelPicker):
    """The model picker with the remote models after the local ones."""

    def __init__(self, db: Database, settings: AppSettings, parent: QWidget | None = None) -> None:
        self._settings = settings  # before the base builds its menu
        super().__init__(db, parent)

    def entries(self) -> list[PickerEntry]:
        return super().entries() + remote_entries(self._settings)


def engine_note(settings: AppSettings, model: LoadedModel | None) -> str:
    """ "on gpu-box · llama-server" for a remote model ("" for this computer's)."""
    if model is None or model.engine == "llama.cpp":
        return ""
    conn = connection_of(settings, model.path)
    machine = conn.name if conn is not None else model.engine.partition(" on ")[2]
    kind = model.info.file_type  # the server's kind (app.remote.probe.loaded_model)
    return f"on {machine} · {kind}" if machine else f"on {kind}"


def down_note(settings: AppSettings, path: str) -> str:
    """What a tab says when the connection of ``path`` did not answer ("" for a file)."""
    conn = connection_of(settings, path)
    if conn is None and parse_address(path) is None:
        return ""
    name = conn.name if conn is not None else "the remote server"
    return f"{name} did not answer: nothing is loaded (the message above says why)"
