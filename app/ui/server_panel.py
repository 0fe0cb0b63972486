"""The Server menu and panel: start and stop the API server inside the window, its port,
"Allow other devices" (with an API key), the URL to copy and a live request log.

:func:`install_server_menu` adds the menu to a window and returns its
:class:`~app.ui.server_controller.ServerController`; :class:`ServerPanel` is the dialog.
Nothing here waits: the controller's start and stop return at once and report through
signals; the log's records arrive as queued signals from the request threads.
"""

from __future__ import annotations

import socket
import time
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, Qt, QTimer, Slot
from PySide6.QtGui import QAction, QGuiApplication
from PySide6.QtWidgets import (
    QAbstractItemView,
    QCheckBox,
    QDialog,
    QFormLayout,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QMainWindow,
    QMenu,
    QPushButton,
    QSpinBox,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.loopback import is_loopback_host
from app.server.app_settings import ServerAppSettings, generate_key
from app.server.service import RequestRecord
from app.session import events as ev
from app.ui.server_controller import (
    LOG_ROWS,
    ServerController,
    ServerState,
    ServerStatus,
)
from app.ui.theme import colors

if TYPE_CHECKING:
    from app.ui.window_protocols import ServerWindow

__all__ = ["LOG_COLUMNS", "ServerPanel", "install_server_menu", "lan_address"]

LOG_COLUMNS = ("Time", "Client", "Endpoint", "Tokens in", "Cached", "Out", "Tokens/s", "Status")


def lan_address() -> str | None:
    """This computer's address on its network (for the URL other devices use): the source
    address of a UDP socket "connected" to a documentation address; no packet is sent."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))
            address = str(probe.getsockname()[0])
        except OSError:
            return None
    return None if is_loopback_host(address) or address == "0.0.0.0" else address


def status_text(record: RequestRecord) -> str:
    if record.status == 200:
        return f"200 {record.finish_reason or ''}".strip()
    if record.status == 499:
        return "client left"
    return f"{record.status} {record.error or ''}".strip()


def log_row(record: RequestRecord) -> tuple[str, ...]:
    return (
        time.strftime("%H:%M:%S", time.localtime(record.at)),
        record.client + (f" ({record.conversation})" if record.conversation else ""),
        record.endpoint,
        str(record.prompt_tokens),
        str(record.cached_tokens),
        str(record.completion_tokens),
        f"{record.tokens_per_second:.1f}" if record.tokens_per_second else "",
        status_text(record),
    )


class ServerPanel(QDialog):
    """The server's settings, state and request log (not modal: it can stay open)."""

    def __init__(self, controller: ServerController, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.controller = controller
        self.setWindowTitle("Server")
        self.setObjectName("server-panel")
        self.resize(760, 520)
        self._build()
        self._show_settings(controller.settings)
        for record in controller.records:
            self.add_record(record)
        controller.statusChanged.connect(self._on_status)
        controller.logged.connect(self.add_record)
        self._on_status(controller.status)

    def _build(self) -> None:
        layout = QVBoxLayout(self)
        intro = QLabel(
            "Other programs (OpenAI clients, curl, editor plugins) can use the loaded model "
            "through an OpenAI-compatible API. Requests and your chats share the model."
        )
        intro.setWordWrap(True)
        layout.addWidget(intro)

        form = QFormLayout()
        self.port = QSpinBox()
        self.port.setObjectName("server-port")
        self.port.setRange(0, 65535)
        self.port.setSpecialValueText("any free port")  # shown for 0
        self.port.editingFinished.connect(self._save)
        form.addRow("Port", self.port)
        self.allow_other = QCheckBox("Allow other devices on the network (needs an API key)")
        self.allow_other.setObjectName("server-allow-other")
        self.allow_other.toggled.connect(self._save)
        form.addRow("", self.allow_other)
        key_row = QHBoxLayout()
        self.key = QLineEdit()
        self.key.setObjectName("server-key")
        self.key.setPlaceholderText("none: any program on this computer may connect")
        self.key.setEchoMode(QLineEdit.EchoMode.PasswordEchoOnEdit)
        self.key.editingFinished.connect(self._save)
        key_row.addWidget(self.key, 1)
        self.generate = QPushButton("Generate key")
        self.generate.setObjectName("server-generate-key")
        self.generate.clicked.connect(self._generate_key)
        key_row.addWidget(self.generate)
        self.copy_key = QPushButton("Copy key")
        self.copy_key.clicked.connect(lambda: self._copy(self.key.text()))
        key_row.addWidget(self.copy_key)
        form.addRow("API key", key_row)
        self.autostart = QCheckBox("Start the server when LlamaDesk starts")
        self.autostart.setObjectName("server-autostart")
        self.autostart.toggled.connect(self._save)
        form.addRow("", self.autostart)
        layout.addLayout(form)

        url_row = QHBoxLayout()
        self.url = QLineEdit()
        self.url.setObjectName("server-url")
        self.url.setReadOnly(True)
        self.url.setPlaceholderText("the server is not running")
        url_row.addWidget(QLabel("URL"))
        url_row.addWidget(self.url, 1)
        self.copy_url = QPushButton("Copy")
        self.copy_url.setObjectName("server-copy-url")
        self.copy_url.clicked.connect(lambda: self._copy(self.url.text()))
        url_row.addWidget(self.copy_url)
        self.start_stop = QPushButton("Start")
        self.start_stop.setObjectName("server-start-stop")
        self.start_stop.clicked.connect(self.controller.toggle)
        url_row.addWidget(self.start_stop)
        layout.addLayout(url_row)

        self.status = QLabel()
        self.status.setObjectName("server-status")
        self.status.setWordWrap(True)
        self.status.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        layout.addWidget(self.status)

        self.log = QTableWidget(0, len(LOG_COLUMNS))
        self.log.setObjectName("server-log")
        self.log.setHorizontalHeaderLabels(list(LOG_COLUMNS))
        self.log.verticalHeader().setVisible(False)
        self.log.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.log.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        header = self.log.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(1, QHeaderView.ResizeMode.Stretch)
        layout.addWidget(self.log, 1)

    # ---------------------------------------------------------------- settings

    def _show_settings(self, s: ServerAppSettings) -> None:
        for widget in (self.port, self.allow_other, self.key, self.autostart):
            widget.blockSignals(True)
        self.port.setValue(s.port)
        self.allow_other.setChecked(s.allow_other_devices)
        self.key.setText(s.api_key)
        self.autostart.setChecked(s.start_with_app)
        for widget in (self.port, self.allow_other, self.key, self.autostart):
            widget.blockSignals(False)

    def current_settings(self) -> ServerAppSettings:
        return ServerAppSettings(
            port=self.port.value(),
            allow_other_devices=self.allow_other.isChecked(),
            api_key=self.key.text().strip(),
            start_with_app=self.autostart.isChecked(),
        )

    @Slot()
    def _save(self) -> None:
        settings = self.current_settings()
        if settings == self.controller.settings:
            return
        error = self.controller.update_settings(settings)
        problem = settings.problem()
        if error is not None:
            self._say(error, error=True)
        elif problem is not None:
            self._say(problem, error=True)
        else:
            self._on_status(self.controller.status)

    @Slot()
    def _generate_key(self) -> None:
        self.key.setText(generate_key())
        self._save()

    def _copy(self, text: str) -> None:
        if text:
            QGuiApplication.clipboard().setText(text)

    # ---------------------------------------------------------------- state

    def _say(self, text: str, error: bool = False) -> None:
        self.status.setText(text)
        self.status.setStyleSheet(f"color: {colors(self).error};" if error else "")

    @Slot(object)
    def _on_status(self, status: ServerStatus) -> None:
        state = status.state
        live = state in (ServerState.RUNNING, ServerState.STARTING, ServerState.STOPPING)
        self.start_stop.setText(
            "Stop" if state in (ServerState.RUNNING, ServerState.STARTING) else "Start"
        )
        self.start_stop.setEnabled(state is not ServerState.STOPPING)
        # the bind's settings cannot change under a running server
        for widget in (self.port, self.allow_other, self.key, self.generate):
            widget.setEnabled(not live)
        text = status.message
        url = ""
        if state is ServerState.RUNNING and status.url is not None:
            url = f"{status.url}/v1"
            if self.controller.settings.allow_other_devices and status.port is not None:
                address = lan_address()
                if address is not None:
                    text += f" Other devices: http://{address}:{status.port}/v1"
        self.url.setText(url)
        self.copy_url.setEnabled(bool(url))
        self._say(text, error=state is ServerState.FAILED)

    @Slot(object)
    def add_record(self, record: RequestRecord) -> None:
        """A finished request, newest first; at most LOG_ROWS rows."""
        self.log.insertRow(0)
        for column, text in enumerate(log_row(record)):
            item = QTableWidgetItem(text)
            if column >= 3:
                item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
            if record.error:
                item.setToolTip(record.error)
            self.log.setItem(0, column, item)
        while self.log.rowCount() > LOG_ROWS:
            self.log.removeRow(self.log.rowCount() - 1)

    def rows(self) -> list[tuple[str, ...]]:
        """The log as shown (tests, accessibility)."""
        out = []
        for row in range(self.log.rowCount()):
            cells = []
            for column in range(self.log.columnCount()):
                item = self.log.item(row, column)
                cells.append(item.text() if item is not None else "")
            out.append(tuple(cells))
        return out


class _WindowLink(QObject):
    """Keeps the controller in step with its window: the open tabs, the model, the close."""

    def __init__(
        self, win: ServerWindow, window: QMainWindow, controller: ServerController
    ) -> None:
        super().__init__(window)
        self.win = win
        self.window = window
        self.controller = controller
        self.panel: ServerPanel | None = None
        # The window tells the controller when a tab opens or closes
        # (set_open_conversations); at start the controller learns the tabs open already.
        controller.statusChanged.connect(self._on_status)
        win.worker.sessionEvent.connect(self._on_session_event)

    @Slot()
    def sync_tabs(self) -> None:
        self.controller.set_open_conversations(tab.cid for tab in self.win.tabs())

    @Slot(object)
    def _on_status(self, status: ServerStatus) -> None:
        if status.state is ServerState.STARTING:
            self.sync_tabs()

    @Slot(object)
    def _on_session_event(self, event: object) -> None:
        # Connected after the window's own slot, so window.model is already current.
        if isinstance(event, ev.ModelLoaded | ev.Reconfigured | ev.ModelUnloaded):
            self.controller.attach_model(self.win.model)
        elif isinstance(event, ev.ShutdownComplete):
            self.controller.stop()  # the window closed (a cancelled close changes nothing)

    def show_panel(self) -> ServerPanel:
        if self.panel is None:
            self.panel = ServerPanel(self.controller, self.window)
        self.panel.show()
        self.panel.raise_()
        self.panel.activateWindow()
        return self.panel


def install_server_menu(win: ServerWindow, window: QMainWindow) -> ServerController:
    """Add the Server menu to ``window`` (``win``: the same window, as what the server
    uses of it) and return its controller. The
    server starts only if the user turned on "Start the server when LlamaDesk starts"
    (after the current event, so the window's tabs are restored first)."""
    controller = ServerController(win.session, lambda: win.model, parent=window)
    link = _WindowLink(win, window, controller)
    controller.window_link = link  # kept with the controller (its parent is the window)
    bar = window.menuBar()
    menu = QMenu("Se&rver", bar)
    menu.setObjectName("server-menu")
    help_menu = bar.findChild(QMenu, "help-menu")  # Help stays the last menu
    if help_menu is not None:
        bar.insertMenu(help_menu.menuAction(), menu)
    else:
        bar.addMenu(menu)
    toggle = QAction("Start server", window)
    toggle.setObjectName("server-toggle")
    toggle.triggered.connect(controller.toggle)
    menu.addAction(toggle)
    panel = QAction("Server panel…", window)
    panel.setObjectName("server-panel-action")
    panel.triggered.connect(link.show_panel)
    menu.addAction(panel)
    copy = QAction("Copy server URL", window)
    copy.setObjectName("server-copy-url-action")
    copy.setEnabled(False)
    copy.triggered.connect(
        lambda: (
            QGuiApplication.clipboard().setText(f"{controller.url}/v1") if controller.url else None
        )
    )
    menu.addAction(copy)

    def on_status(status: ServerStatus) -> None:
        serving = status.state in (ServerState.RUNNING, ServerState.STARTING)
        toggle.setText("Stop server" if serving else "Start server")
        toggle.setEnabled(status.state is not ServerState.STOPPING)
        copy.setEnabled(status.state is ServerState.RUNNING)

    controller.statusChanged.connect(on_status)
    if controller.settings.start_with_app:
        QTimer.singleShot(0, controller.start)
    return controller
