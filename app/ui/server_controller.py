"""The API server inside the window: started and stopped on the window's own session.

:class:`ServerController` lives on the GUI thread. ``start()`` returns at once: a job on
a pool thread (:class:`~app.ui.background.BackgroundJobs`, the UI's one kind of background
work) builds the :class:`~app.server.service.ApiService` (it reads the API conversations'
names from the database), binds the port and then serves until stopped (the HTTP server's
own threads answer); the outcome comes back as a queued signal. ``stop()`` hands the
teardown (waiting for the listener to end, closing the API conversations) to the pool's
second thread. Request
records arrive on request threads and are re-emitted through :attr:`logged`, which Qt
queues to the GUI thread.

API requests and the window's tabs share the one session, so they are decoded together.
A conversation a tab has open is not generated into by the API (two writers on one
sequence): the controller keeps the open conversation ids in a frozenset that request
threads read (a reference swap is atomic) and the GUI thread replaces.
"""

from __future__ import annotations

import contextlib
import enum
import logging
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from PySide6.QtCore import QObject, Signal, Slot

from app import paths
from app.server import app_settings
from app.server.app_settings import ServerAppSettings
from app.server.config import ServerConfig
from app.server.http import ApiServer
from app.server.runner import SLOTS_FOLDER, listen_error
from app.server.service import ApiService, RequestRecord
from app.server.store import ConversationStore
from app.session import LoadedModel, Session
from app.ui.background import BackgroundJobs

log = logging.getLogger(__name__)

LOG_ROWS = 200  # records kept for a panel opened later (and rows the panel shows)
PARALLEL = 2  # API requests generating at once next to the tabs
RESIDENT = 2  # idle API conversations kept in memory


class ServerState(enum.Enum):
    STOPPED = "stopped"
    STARTING = "starting"
    RUNNING = "running"
    STOPPING = "stopping"
    FAILED = "failed"


@dataclass(frozen=True)
class ServerStatus:
    state: ServerState
    message: str  # the sentence the panel shows
    url: str | None = None  # while running: the base URL on this computer (no /v1)
    port: int | None = None


class _Running:
    """What one start made (owned by the pool threads after the hand-over)."""

    def __init__(self, service: ApiService, store: ConversationStore, http: ApiServer) -> None:
        self.service = service
        self.store = store
        self.http = http
        self.unsubscribe_log: Callable[[], None] = lambda: None


def _url(host: str, port: int) -> str:
    shown = "127.0.0.1" if host in ("0.0.0.0", "::") else host
    return f"http://{shown}:{port}"


class ServerController(QObject):
    """Start, stop and watch the server of one window's session (GUI thread)."""

    statusChanged = Signal(object)  # ServerStatus
    logged = Signal(object)  # RequestRecord; emitted on request threads, queued here
    _started = Signal(object, object)  # (_Running | None, error sentence | None)
    _stopped = Signal()

    def __init__(
        self,
        session: Session,
        model: Callable[[], LoadedModel | None],
        settings: ServerAppSettings | None = None,
        settings_path: Path | None = None,
        parent: QObject | None = None,
    ) -> None:
        """``model()``: the model the window holds now (read on the GUI thread at each
        start; the service follows later loads itself). ``settings``: as saved (default:
        read from ``server.json``)."""
        super().__init__(parent)
        self.session = session
        self._model = model
        self._settings_path = settings_path
        warning: str | None = None
        if settings is None:
            settings, warning = app_settings.load(settings_path)
        self.settings = settings
        self.records: deque[RequestRecord] = deque(maxlen=LOG_ROWS)
        self._open: frozenset[int] = frozenset()
        self._running: _Running | None = None
        self._restart = False
        # two threads: the one that serves (as long as the server runs) and a teardown
        self._jobs = BackgroundJobs("api-server", threads=2)
        self.window_link: QObject | None = None  # install_server_menu's link to the window
        self.status = ServerStatus(
            ServerState.STOPPED, warning or "The server is stopped.", None, None
        )
        self._started.connect(self._on_started)
        self._stopped.connect(self._on_stopped)
        self.logged.connect(self._on_logged)

    # ---------------------------------------------------------------- settings

    def update_settings(self, settings: ServerAppSettings) -> str | None:
        """Keep and save new settings (applied at the next start); an error sentence when
        they cannot be saved (they are kept for this run)."""
        self.settings = settings
        try:
            app_settings.save(settings, self._settings_path)
        except OSError as exc:
            return f"The server settings could not be saved: {exc.strerror or exc}."
        return None

    # ---------------------------------------------------------------- tabs

    def set_open_conversations(self, conversation_ids: Iterable[int]) -> None:
        """The storage ids of the conversations the window's tabs have open (GUI thread):
        API requests naming one of them get a 409 until its tab closes."""
        new = frozenset(conversation_ids)
        changed = new ^ self._open
        self._open = new
        running = self._running
        if changed and running is not None:
            running.service.pool.handed_over(set(changed))

    def api_busy(self, conversation_id: int) -> bool:
        """An API request is answering in this conversation now (a tab must not open it
        meanwhile: both would write into one sequence)."""
        running = self._running
        return running is not None and running.service.pool.is_busy(conversation_id)

    def _in_use(self, conversation_id: int) -> bool:  # on request threads
        return conversation_id in self._open

    # ---------------------------------------------------------------- start / stop

    @property
    def running(self) -> bool:
        return self.status.state is ServerState.RUNNING

    @property
    def url(self) -> str | None:
        return self.status.url

    def _set(self, status: ServerStatus) -> None:
        self.status = status
        self.statusChanged.emit(status)

    @Slot()
    def toggle(self) -> None:
        if self.status.state in (ServerState.RUNNING, ServerState.STARTING):
            self.stop()
        else:
            self.start()

    @Slot()
    def start(self) -> None:
        if self.status.state is not ServerState.STOPPED and not self._failed():
            if self.status.state is ServerState.STOPPING:
                self._restart = True  # start again once the teardown is done
            return
        settings = self.settings
        problem = settings.problem()
        if problem is not None:
            self._set(ServerStatus(ServerState.FAILED, problem))
            return
        config = ServerConfig(
            host=settings.host,
            port=settings.port,
            api_key=settings.api_key or None,
            parallel=PARALLEL,
            max_resident=RESIDENT,
        )
        model = self._model()
        self._set(ServerStatus(ServerState.STARTING, "Starting the server…"))
        self._jobs.submit(lambda: self._bind_and_serve(config, model))

    def _failed(self) -> bool:
        return self.status.state is ServerState.FAILED

    def _bind_and_serve(self, config: ServerConfig, model: LoadedModel | None) -> None:
        """On a pool thread: the service (a database read), the bind, then serving (until
        the teardown shuts the listener down)."""
        try:
            # the window's conversation list hears of API conversations as they are stored
            store = ConversationStore(paths.database_path(), self.session.tell_stored)
            service = ApiService(
                self.session,
                config,
                store,
                model=model,
                attached=True,
                in_use_elsewhere=self._in_use,
                slots_dir=paths.state_dir() / SLOTS_FOLDER,
            )
        except Exception as exc:
            log.exception("the API service could not be made")
            self._report(None, f"The server could not start: {exc}.")
            return
        try:
            http = ApiServer(service, config)
        except OSError as exc:
            service.close()
            store.close()
            self._report(None, listen_error(config.host, config.port, exc))
            return
        running = _Running(service, store, http)
        running.unsubscribe_log = service.subscribe_log(self._relay)
        self._report(running, None)
        http.serve_forever(poll_interval=0.2)

    # The window (and this object with it) may be gone when a helper or request thread
    # reports: the report is then dropped, not raised in that thread.

    def _report(self, running: _Running | None, error: str | None) -> None:
        with contextlib.suppress(RuntimeError):
            self._started.emit(running, error)

    def _relay(self, record: RequestRecord) -> None:  # on request threads
        with contextlib.suppress(RuntimeError):
            self.logged.emit(record)

    @Slot(object, object)
    def _on_started(self, running: _Running | None, error: str | None) -> None:
        if running is None:
            self._set(ServerStatus(ServerState.FAILED, error or "The server could not start."))
            return
        self._running = running
        running.service.pool.handed_over(set(self._open))
        if self.status.state is not ServerState.STARTING:  # stopped while binding
            self._teardown(running)
            return
        port = running.http.port
        url = _url(self.settings.host, port)
        self._set(ServerStatus(ServerState.RUNNING, self._running_sentence(url), url, port))

    def _running_sentence(self, url: str) -> str:
        who = (
            "other devices too (with the API key)"
            if self.settings.allow_other_devices
            else "programs on this computer"
        )
        key = " Clients must send the API key." if self.settings.api_key else ""
        return f"Serving at {url}/v1 for {who}.{key}"

    def attach_model(self, model: LoadedModel | None) -> None:
        """The window's model changed (GUI thread). The service follows the session's
        events itself; this covers a load that finished while the service was being made."""
        running = self._running
        if running is not None:
            running.service.attach(model)

    @Slot()
    def stop(self) -> None:
        running = self._running
        if self.status.state is ServerState.STARTING and running is None:
            # the bind is under way: _on_started tears it down when it reports
            self._set(ServerStatus(ServerState.STOPPING, "Stopping the server…"))
            return
        if running is None:
            return
        self._set(ServerStatus(ServerState.STOPPING, "Stopping the server…"))
        self._teardown(running)

    def _teardown(self, running: _Running) -> None:
        self._running = None

        def work() -> None:  # on a pool thread
            running.unsubscribe_log()
            running.http.shutdown()  # waits for serve_forever (one poll interval)
            running.http.server_close()
            running.http.close_connections()  # keep-alive clients too
            running.service.close()  # the API conversations close (named ones saved)
            running.store.close()
            with contextlib.suppress(RuntimeError):
                self._stopped.emit()

        self._jobs.submit(work)

    @Slot()
    def _on_stopped(self) -> None:
        if self._running is not None:
            return  # started again meanwhile
        self._set(ServerStatus(ServerState.STOPPED, "The server is stopped."))
        if self._restart:
            self._restart = False
            self.start()

    @Slot(object)
    def _on_logged(self, record: RequestRecord) -> None:
        self.records.append(record)
