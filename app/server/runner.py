"""A whole server: a session with the model loaded, the service and the HTTP listener."""

from __future__ import annotations

import errno
import logging
import threading
from pathlib import Path

from app import paths
from app.engine import ContextSettings, ModelSettings
from app.errors import LlamaDeskError
from app.server.config import ServerConfig
from app.server.http import ApiServer
from app.server.service import ApiService
from app.server.store import ConversationStore
from app.session import EngineLoader, LoadedModel, Session
from app.storage import StateStore

log = logging.getLogger(__name__)

LOAD_TIMEOUT_S = 600.0
SLOTS_FOLDER = "slots"  # under the states folder: /slots save and restore files


def listen_error(host: str, port: int, exc: OSError) -> str:
    """A sentence for a failed bind that says what to do."""
    if exc.errno == errno.EADDRINUSE:
        return (
            f"Port {port} on {host} is already in use (another server?): stop that program "
            "or choose another port."
        )
    if exc.errno == errno.EACCES:
        return (
            f"Port {port} on {host} needs more rights than LlamaDesk has: choose a port above 1023."
        )
    if exc.errno == errno.EADDRNOTAVAIL:
        return f"{host} is not an address of this computer: use 127.0.0.1 or 0.0.0.0."
    return f"Cannot listen on {host}:{port}: {exc.strerror or exc}."


class ServerRunner:
    """``start()`` binds and loads the model; ``serve_forever()`` or a background thread
    answers; ``close()`` stops listening, closes the scratch conversations and shuts the
    session down (every named conversation's state is saved)."""

    def __init__(
        self,
        model_path: Path | str,
        settings: ContextSettings,
        config: ServerConfig,
        *,
        persist: bool = True,
        home: Path | None = None,
        loader: EngineLoader | None = None,
        model_settings: ModelSettings | None = None,
    ) -> None:
        """``persist``: API conversations in the app's database and their caches in its
        states folder (``home``: another data folder than the app's, for tests).
        ``loader``: another engine than llama.cpp here (``serve --remote``: then
        ``model_path`` is the model's name on that server)."""
        config.validate()
        self.config = config
        # Absolute: /props reports it, and a client's working folder is not ours.
        self.model_path = Path(model_path).absolute()
        # what the loader is given: the file, or the model's name on a remote server
        self._load_path = str(self.model_path) if loader is None else str(model_path)
        self.settings = settings
        self.model_settings = model_settings  # the chat template (--chat-template)
        states = home / "states" if home is not None else paths.state_dir()
        database = home / "llamadesk.sqlite3" if home is not None else paths.database_path()
        store = StateStore(states) if persist else None
        self.store = ConversationStore(database) if persist else None
        self.session = Session(store, None, name="api-session", loader=loader)
        self.service = ApiService(
            self.session, config, self.store, slots_dir=states / SLOTS_FOLDER if persist else None
        )
        self.service.generation.local_tokens = loader is None
        self.service.remote_loader = loader  # its engine answers what a session cannot
        self.http: ApiServer | None = None
        self._thread: threading.Thread | None = None
        self._closed = False

    def start(self, background: bool = False) -> LoadedModel:
        """Bind, then load: a port in use is reported at once, not after the model loaded.
        ``background``: answer from a thread already while loading (``/health`` says
        "Loading model" with a 503, as llama-server's does); else connections wait in the
        listen queue until ``serve_forever``."""
        try:
            self.http = ApiServer(self.service, self.config)
        except OSError as exc:
            self.close()
            raise LlamaDeskError(listen_error(self.config.host, self.config.port, exc)) from None
        try:
            if background:
                self.start_background()
            self.session.load_model(
                self._load_path, self.settings, model_settings=self.model_settings
            )
            return self.service.wait_loaded(LOAD_TIMEOUT_S)
        except BaseException:
            self.close()
            raise

    @property
    def url(self) -> str:
        assert self.http is not None
        host = self.config.host
        if ":" in host and not host.startswith("["):
            host = f"[{host}]"
        return f"http://{host}:{self.http.port}"

    def serve_forever(self) -> None:
        assert self.http is not None
        self.http.serve_forever(poll_interval=0.2)

    def start_background(self) -> None:
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self.serve_forever, name="api-http", daemon=True)
        self._thread.start()

    def wait(self) -> None:
        """Until the background listener stops (``stop_listening``); Ctrl+C interrupts."""
        while self._thread is not None and self._thread.is_alive():
            self._thread.join(0.5)

    def stop_listening(self) -> None:
        """Make ``serve_forever`` return (from another thread or a signal handler's thread)."""
        if self.http is not None:
            threading.Thread(target=self.http.shutdown, daemon=True).start()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self.http is not None:
            if self._thread is not None:
                self.http.shutdown()
                self._thread.join(10.0)
            self.http.server_close()
            self.http.close_connections()
        self.service.close()
        self.session.shutdown()
        if not self.session.join(30.0):
            log.warning("the session did not stop in time")
        if self.store is not None:
            self.store.close()
