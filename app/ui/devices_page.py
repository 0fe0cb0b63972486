"""The Devices section of the settings: the devices llama.cpp can use (name, type,
free/total memory), the remote (RPC) workers, GPU layers, and the plan for the current
model.

Remote workers are added by ``host:port`` and probed off the GUI thread in pure Python
(:func:`~app.engine.rpc_probe.probe`: a dead, busy or wrong endpoint gets a sentence and
never reaches llama.cpp). Loopback only unless the user ticks "This network is trusted":
the RPC protocol has no password and no encryption. The choices are saved at once in
``devices.json`` (:mod:`app.ui.devices_settings`) and take effect at the next load; a model
that uses remote workers runs in a separate process (:mod:`app.offload_loader`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from PySide6.QtCore import QObject, Qt, Signal, SignalInstance
from PySide6.QtWidgets import (
    QAbstractItemView,
    QCheckBox,
    QGroupBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QListWidget,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.engine import ContextSettings
from app.engine.rpc_probe import RpcProbeError, parse_endpoint
from app.errors import LlamaDeskError
from app.settings_schema import DEVICE_FIELDS, format_bytes
from app.settings_schema.device_fields import parse_gpu_layers, split_names
from app.ui.background import BackgroundJobs
from app.ui.devices_plan import PlanLabel
from app.ui.devices_settings import DeviceSettings, load_device_settings, save_device_settings
from app.ui.wording import shown_help

DEVICE_COLUMNS = ("Name", "Type", "Free", "Total")
Row = tuple[str, str, int, int]  # name, type, free bytes, total bytes


class _Bridge(QObject):
    listed = Signal(object)  # list[Row], or a sentence (str)
    probed = Signal(str, object)  # endpoint, None (it answered) or a sentence


def _emit(signal: SignalInstance, *args: object) -> None:
    try:
        signal.emit(*args)
    except RuntimeError:  # the page is gone
        pass


def device_rows(endpoints: tuple[str, ...]) -> list[Row] | str:
    """On a pool thread: this machine's devices from ggml's registry, then each remote
    worker's as it answers the probe (not registered with llama.cpp here)."""
    from app.engine import devices as dev
    from app.engine.rpc_probe import probe

    rows: list[Row] = []
    try:
        for d in dev.list_devices():
            if d.kind is not dev.DeviceKind.REMOTE:
                rows.append((d.label(), d.kind.value, d.free_bytes, d.total_bytes))
    except LlamaDeskError as exc:
        return str(exc)
    for endpoint in endpoints:
        try:
            info = probe(endpoint, timeout_s=3.0)
        except RpcProbeError as exc:
            rows.append((endpoint, f"remote: {exc}", 0, 0))
            continue
        for i, memory in enumerate(info.devices):
            name = f"{endpoint} #{i}" if len(info.devices) > 1 else endpoint
            rows.append((name, "remote", memory.free_bytes, memory.total_bytes))
    return rows


class DevicesPage(QWidget):
    """See the module docstring. ``model_path``: the current model (its plan is shown);
    ``context``: the context settings the plan counts the tabs of. It opens folded (a
    toggle, as the panel's "Advanced" one): the devices are listed, and the plan made,
    the first time it is unfolded."""

    changed = Signal()  # the saved device choices changed (the next load uses them)

    def __init__(
        self,
        model_path: str | None = None,
        context: Callable[[], ContextSettings] | None = None,
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self.setObjectName("devicesSection")
        self.settings = load_device_settings()
        self._model_path = model_path
        self._started = False
        self._jobs = BackgroundJobs("devices-page")
        self._bridge = _Bridge()
        self._bridge.listed.connect(self._on_listed)
        self._bridge.probed.connect(self._on_probed)
        self._probing: set[str] = set()
        self._build(context)

    def _build(self, context: Callable[[], ContextSettings] | None) -> None:
        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        self.toggle = QToolButton()
        self.toggle.setObjectName("devicesToggle")
        self.toggle.setText("Devices: GPU layers, remote workers")
        self.toggle.setCheckable(True)
        self.toggle.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        self.toggle.setArrowType(Qt.ArrowType.RightArrow)
        self.toggle.setAutoRaise(True)
        self.toggle.toggled.connect(self.set_open)
        outer.addWidget(self.toggle)
        self.body = QGroupBox("Devices")
        self.body.hide()
        outer.addWidget(self.body)
        layout = QVBoxLayout(self.body)
        note = QLabel(
            "Where the model's layers run. Changes are saved at once and take effect the "
            "next time a model is loaded."
        )
        note.setWordWrap(True)
        layout.addWidget(note)

        self.table = QTableWidget(0, len(DEVICE_COLUMNS))
        self.table.setObjectName("devicesTable")
        self.table.setHorizontalHeaderLabels(DEVICE_COLUMNS)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.verticalHeader().hide()
        self.table.horizontalHeader().setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        self.table.setMinimumHeight(110)
        layout.addWidget(self.table)

        layers_row = QHBoxLayout()
        spec = DEVICE_FIELDS["gpu_layers"]
        layers_label = QLabel(f"{spec.label}:")
        self.gpu_layers = QLineEdit(self.settings.gpu_layers)
        self.gpu_layers.setObjectName("gpuLayersEdit")
        self.gpu_layers.setToolTip(shown_help(spec.help))
        self.gpu_layers.editingFinished.connect(self._on_gpu_layers)
        layers_row.addWidget(layers_label)
        layers_row.addWidget(self.gpu_layers, 1)
        layout.addLayout(layers_row)

        layout.addWidget(QLabel("Remote workers (“llamadesk rpc-worker” on that machine):"))
        self.endpoints = QListWidget()
        self.endpoints.setObjectName("rpcEndpoints")
        self.endpoints.setMaximumHeight(90)
        self.endpoints.addItems(list(split_names(self.settings.rpc_servers)))
        layout.addWidget(self.endpoints)
        add_row = QHBoxLayout()
        self.endpoint_edit = QLineEdit()
        self.endpoint_edit.setObjectName("rpcEndpointEdit")
        self.endpoint_edit.setPlaceholderText("127.0.0.1:50052")
        self.endpoint_edit.returnPressed.connect(self.add_endpoint)
        self.add_button = QPushButton("Add")
        self.add_button.setObjectName("addEndpointButton")
        self.add_button.clicked.connect(self.add_endpoint)
        self.remove_button = QPushButton("Remove")
        self.remove_button.setObjectName("removeEndpointButton")
        self.remove_button.clicked.connect(self.remove_endpoint)
        add_row.addWidget(self.endpoint_edit, 1)
        add_row.addWidget(self.add_button)
        add_row.addWidget(self.remove_button)
        layout.addLayout(add_row)
        self.trusted = QCheckBox("This network is trusted (allow workers beyond this computer)")
        self.trusted.setObjectName("trustedNetwork")
        self.trusted.setToolTip(
            "The RPC protocol has no password and no encryption: anyone on the network can "
            "use the worker and read the model. Otherwise reach a worker through an SSH "
            "tunnel or WireGuard and add it as 127.0.0.1:PORT."
        )
        self.trusted.setChecked(self.settings.trusted_network)
        self.trusted.toggled.connect(self._on_trusted)
        layout.addWidget(self.trusted)

        self.message = QLabel()
        self.message.setObjectName("devicesMessage")
        self.message.setWordWrap(True)
        self.message.hide()
        layout.addWidget(self.message)

        self.plan_label = PlanLabel(context)
        layout.addWidget(self.plan_label)

    def set_open(self, open_: bool) -> None:
        self.toggle.setChecked(open_)
        self.toggle.setArrowType(Qt.ArrowType.DownArrow if open_ else Qt.ArrowType.RightArrow)
        self.body.setVisible(open_)
        if open_ and not self._started:
            self._started = True
            self.plan_label.show_plan(self._model_path)
            self.refresh_devices()

    # -- the saved choices ---------------------------------------------------------------

    def _save(self, settings: DeviceSettings) -> None:
        self.settings = settings
        try:
            save_device_settings(settings)
        except OSError as exc:
            self._say(f"The device settings could not be saved: {exc.strerror or exc}.")
            return
        self.changed.emit()
        self.plan_label.refresh()

    def _say(self, text: str) -> None:
        self.message.setText(text)
        self.message.setVisible(bool(text))

    def _on_gpu_layers(self) -> None:
        text = self.gpu_layers.text().strip() or "auto"
        try:
            parse_gpu_layers(text)
        except ValueError as exc:
            self._say(str(exc))
            return
        self._say("")
        if text != self.settings.gpu_layers:
            self._save(replace(self.settings, gpu_layers=text))

    def _on_trusted(self, checked: bool) -> None:
        self._save(replace(self.settings, trusted_network=checked))

    def endpoint_list(self) -> tuple[str, ...]:
        return tuple(self.endpoints.item(i).text() for i in range(self.endpoints.count()))

    def add_endpoint(self) -> None:
        """Check the address, then probe it off the GUI thread; added when it answers."""
        text = self.endpoint_edit.text().strip()
        try:
            endpoint = parse_endpoint(text)
        except RpcProbeError as exc:
            self._say(str(exc))
            return
        if not endpoint.is_loopback and not self.trusted.isChecked():
            self._say(
                f"{endpoint} is not this computer: the RPC protocol has no password and no "
                "encryption, so tick “This network is trusted” if every machine on it is "
                "yours, or reach the worker through an SSH tunnel or WireGuard and add "
                "127.0.0.1:PORT."
            )
            return
        name = str(endpoint)
        if name in self.endpoint_list():
            self._say(f"{name} is already in the list.")
            return
        self._probing.add(name)
        self._say(f"Asking {name}…")
        bridge = self._bridge  # held by the job: see devices_plan.PlanLabel.show_plan

        def job() -> None:  # on a pool thread
            from app.engine.rpc_probe import probe

            try:
                probe(name, timeout_s=5.0)
            except RpcProbeError as exc:
                _emit(bridge.probed, name, str(exc))
                return
            _emit(bridge.probed, name, None)

        self._jobs.submit(job)

    def _on_probed(self, endpoint: str, problem: object) -> None:
        self._probing.discard(endpoint)
        if problem is not None:
            self._say(str(problem))
            return
        self.endpoints.addItem(endpoint)
        self.endpoint_edit.clear()
        self._say(f"{endpoint} answered; it is used from the next load.")
        self._save(self.settings.with_endpoints(self.endpoint_list()))
        self.refresh_devices()

    def remove_endpoint(self) -> None:
        row = self.endpoints.currentRow()
        if row < 0:
            return
        self.endpoints.takeItem(row)
        self._save(self.settings.with_endpoints(self.endpoint_list()))
        self.refresh_devices()

    # -- the device table ----------------------------------------------------------------

    def refresh_devices(self) -> None:
        endpoints = self.endpoint_list()
        bridge = self._bridge  # held by the job: see devices_plan.PlanLabel.show_plan

        def job() -> None:  # on a pool thread
            _emit(bridge.listed, device_rows(endpoints))

        self._jobs.submit(job)

    def _on_listed(self, rows: object) -> None:
        if isinstance(rows, str):
            self._say(rows)
            return
        assert isinstance(rows, list)
        self.table.setRowCount(len(rows))
        for r, (name, kind, free, total) in enumerate(rows):
            cells = (
                name,
                kind,
                format_bytes(free) if total else "",
                format_bytes(total) if total else "",
            )
            for c, text in enumerate(cells):
                self.table.setItem(r, c, QTableWidgetItem(text))

    def busy(self) -> bool:
        return bool(self._probing)

    def wait_idle(self, timeout_s: float = 15.0) -> bool:
        return self._jobs.wait_idle(timeout_s) and self.plan_label.wait_idle(timeout_s)
