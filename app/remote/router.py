"""The window's loader: local GGUF files by path, remote models by address.

:class:`EngineRouter` is the session's :class:`~app.session.engine_port.EngineLoader`
in the window. A path that is a remote model's address (``remote://<connection>/<model>``,
:mod:`app.remote.saved`) loads through a :class:`~app.remote.loader.RemoteLoader` for
that saved connection, with its API key read at load time (on the session thread, not the
GUI's: a keyring may take a moment); anything else goes to the local loader. The
connections are read from ``connections()`` at each load, so the one list in the app
settings is all there is to keep up to date.
"""

from __future__ import annotations

from collections.abc import Callable

from app.engine import ContextSettings, ModelSettings
from app.errors import LlamaDeskError
from app.remote.loader import RemoteLoader
from app.remote.saved import ApiKeys, SavedConnection, parse_address
from app.session.engine_port import EngineLoader, Loaded, Progress


class EngineRouter:
    """See the module docstring."""

    def __init__(
        self,
        connections: Callable[[], tuple[SavedConnection, ...]],
        keys: ApiKeys,
        local: EngineLoader | None = None,
    ) -> None:
        if local is None:
            from app.session.local_engine import LocalLoader

            local = LocalLoader()
        self._connections = connections
        self._keys = keys
        self._local = local

    @property
    def local(self) -> EngineLoader:
        """The loader of local files."""
        return self._local

    def _saved(self, path: str) -> tuple[SavedConnection, str] | None:
        """The saved connection and model of a remote address (None: a local path)."""
        parsed = parse_address(path)
        if parsed is None:
            return None
        cid, model = parsed
        saved = next((c for c in self._connections() if c.id == cid), None)
        if saved is None:
            raise LlamaDeskError(
                f"There is no connection {cid!r} any more (Preferences ▸ Engines): "
                "add it again to use its models."
            )
        if saved.needs_confirmation:
            raise LlamaDeskError(
                f"{saved.url} is plain http:// to another computer: confirm it in "
                "Preferences ▸ Engines first (the key and messages travel unencrypted)."
            )
        return saved, model

    def check(self, path: str) -> None:
        found = self._saved(path)
        if found is None:
            self._local.check(path)
            return
        saved, model = found
        saved.connection(None, model or None).validate()

    def load(
        self,
        path: str,
        settings: ContextSettings,
        progress: Progress,
        fallback: bool,
        *,
        model_settings: ModelSettings | None = None,
    ) -> Loaded:
        found = self._saved(path)
        if found is None:
            if model_settings is None:
                return self._local.load(path, settings, progress, fallback)
            return self._local.load(
                path, settings, progress, fallback, model_settings=model_settings
            )
        saved, model = found
        key = self._keys.get(saved.id) if saved.has_key else None
        if saved.has_key and key is None:
            raise LlamaDeskError(
                f"The API key of {saved.name} is not kept here any more ({self._keys.where()}): "
                "give it again in Preferences ▸ Engines."
            )
        loader = RemoteLoader(saved.connection(key, model or None), name=saved.name, address=path)
        return loader.load("", settings, progress, fallback)
