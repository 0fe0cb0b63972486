"""Preferences ▸ Engines: the servers this window can talk to (remote engines).

Add a connection by its name, URL and optional API key; Test it (the probe runs on a
background job, never on the GUI thread: what kind of server it is, its models from
``/v1/models``, its context size where it says); Remove it. Plain ``http://`` to anything
but this computer asks once, when the connection is added, and the answer is kept with it
(the key and every message would travel unencrypted).

The connections live in the app settings (``AppSettings.remote_connections``, read and
written through :mod:`app.remote.saved`), and a change is saved at once (not at OK: a
key in the keyring and a test's answer are not things to undo with Cancel). The API key
goes to :class:`~app.remote.saved.ApiKeys` (the system keyring, else ``remote-keys.json``,
owner-only) and is never shown, logged or written to the settings.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtWidgets import (
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QMessageBox,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from app.errors import LlamaDeskError
from app.remote.loader import probe_connection
from app.remote.probe import ServerTraits
from app.remote.saved import (
    ApiKeys,
    SavedConnection,
    check_new,
    default_keys,
    dump_connections,
    load_connections,
    new_id,
    with_probe,
)
from app.storage import AppSettings
from app.ui.background import BackgroundJobs

log = logging.getLogger(__name__)


def describe(conn: SavedConnection) -> str:
    """One line for the list: the name, the URL, what the last test found."""
    if not conn.kind:
        found = "not tested"
    else:
        n = len(conn.models)
        found = f"{conn.kind}, {n} model{'s' if n != 1 else ''}"
        if conn.n_ctx:
            found += f", context {conn.n_ctx:,}"
    return f"{conn.name} · {conn.url} · {found}"


def found_text(conn: SavedConnection, traits: ServerTraits) -> str:
    """What a test found, in words."""
    kind = traits.kind.value + (f" {traits.version}" if traits.version else "")
    models = ", ".join(traits.models) if traits.models else "none listed"
    context = (
        f"context {traits.n_ctx:,} tokens per conversation"
        if traits.n_ctx
        else "it does not say its context size"
    )
    slots = f" · {traits.total_slots} slots" if traits.pins_slots else ""
    if traits.slot_files:
        slots += ", kept in files when a chat closes"
    missing = " ".join(s for s in traits.unavailable() if "context size" not in s)
    return f"{conn.name} answers: {kind} · models: {models} · {context}{slots}." + (
        f" {missing}" if missing else ""
    )


@functools.cache
def probe_jobs() -> BackgroundJobs:
    """The process's one pool for the Engines' tests: it outlives the dialog (a pool that
    went with it would make closing the dialog wait for a server that does not answer)."""
    return BackgroundJobs("engines-probe")


class _Bridge(QObject):
    """Lives on the GUI thread; the probe's job emits through it (queued)."""

    tested = Signal(str, object)  # connection id, ServerTraits or the sentence (str)


class EnginesPage(QWidget):
    """See the module docstring. ``save`` writes the settings; ``changed`` is emitted
    after each change of the list (the window's model picker reads it again)."""

    changed = Signal()

    def __init__(
        self,
        settings: AppSettings,
        save: Callable[[AppSettings], None],
        keys: ApiKeys | None = None,
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self.setObjectName("engines-page")
        self._settings = settings
        self._save = save
        self._keys = keys if keys is not None else default_keys()
        self._jobs = probe_jobs()
        self._bridge = _Bridge(self)
        self._bridge.tested.connect(self._on_tested)
        self._testing: set[str] = set()
        self._confirm: QMessageBox | None = None
        self._build()
        self._refresh()

    # -- construction ---------------------------------------------------------------------

    def _build(self) -> None:
        outer = QVBoxLayout(self)
        intro = QLabel(
            "Servers that can answer your chats: llama-server, vLLM, Ollama, LM Studio or "
            "another LlamaDesk. Their models are listed in the model picker beside your "
            "files. Changes here are saved at once."
        )
        intro.setWordWrap(True)
        outer.addWidget(intro)
        self.list = QListWidget()
        self.list.setObjectName("engines-list")
        self.list.currentRowChanged.connect(lambda _row: self._sync_buttons())
        outer.addWidget(self.list, 1)
        row = QHBoxLayout()
        self.test_button = QPushButton("Test")
        self.test_button.setObjectName("engines-test")
        self.test_button.setToolTip("Ask the server what it is and which models it has.")
        self.test_button.clicked.connect(self.test_selected)
        self.remove_button = QPushButton("Remove")
        self.remove_button.setObjectName("engines-remove")
        self.remove_button.clicked.connect(self.remove_selected)
        row.addWidget(self.test_button)
        row.addWidget(self.remove_button)
        row.addStretch(1)
        outer.addLayout(row)
        form = QFormLayout()
        self.name_edit = QLineEdit()
        self.name_edit.setObjectName("engines-name")
        self.name_edit.setPlaceholderText("gpu-box")
        self.url_edit = QLineEdit()
        self.url_edit.setObjectName("engines-url")
        self.url_edit.setPlaceholderText("https://gpu-box.example:8443 or http://127.0.0.1:8080")
        self.key_edit = QLineEdit()
        self.key_edit.setObjectName("engines-key")
        self.key_edit.setEchoMode(QLineEdit.EchoMode.Password)
        self.key_edit.setPlaceholderText("optional")
        self.key_edit.setToolTip(f"Kept in {self._keys.where()}; never in settings.json.")
        form.addRow("Name", self.name_edit)
        form.addRow("URL", self.url_edit)
        form.addRow("API key", self.key_edit)
        outer.addLayout(form)
        self.add_button = QPushButton("Add and test")
        self.add_button.setObjectName("engines-add")
        self.add_button.clicked.connect(self.add_from_fields)
        outer.addWidget(self.add_button, 0, Qt.AlignmentFlag.AlignLeft)
        self.status = QLabel()
        self.status.setObjectName("engines-status")
        self.status.setWordWrap(True)
        self.status.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        outer.addWidget(self.status)

    # -- the list -------------------------------------------------------------------------

    def connections(self) -> tuple[SavedConnection, ...]:
        return load_connections(self._settings.remote_connections)

    def _store(self, conns: tuple[SavedConnection, ...]) -> bool:
        old = self._settings.remote_connections
        self._settings.remote_connections = dump_connections(conns)
        try:
            self._save(self._settings)
        except LlamaDeskError as exc:
            self._settings.remote_connections = old  # nothing half-saved
            self.say(str(exc))
            return False
        self._refresh()
        self.changed.emit()
        return True

    def _refresh(self) -> None:
        current = self.selected()
        self.list.clear()
        for conn in self.connections():
            item = QListWidgetItem(describe(conn))
            item.setData(Qt.ItemDataRole.UserRole, conn.id)
            item.setToolTip(
                ", ".join(conn.models) if conn.models else "Test it to list its models."
            )
            self.list.addItem(item)
            if current is not None and conn.id == current.id:
                self.list.setCurrentItem(item)
        self._sync_buttons()

    def selected(self) -> SavedConnection | None:
        item = self.list.currentItem()
        if item is None:
            return None
        cid = item.data(Qt.ItemDataRole.UserRole)
        return next((c for c in self.connections() if c.id == cid), None)

    def select(self, connection_id: str) -> None:
        for row in range(self.list.count()):
            if self.list.item(row).data(Qt.ItemDataRole.UserRole) == connection_id:
                self.list.setCurrentRow(row)

    def _sync_buttons(self) -> None:
        conn = self.selected()
        self.test_button.setEnabled(conn is not None and conn.id not in self._testing)
        self.remove_button.setEnabled(conn is not None)

    def say(self, text: str) -> None:
        self.status.setText(text)

    # -- add, remove ----------------------------------------------------------------------

    def add_from_fields(self) -> None:
        """Add the connection the fields describe (asks first for plain http:// to another
        computer), then test it."""
        name, url = self.name_edit.text().strip(), self.url_edit.text().strip()
        key = self.key_edit.text().strip()
        problem = check_new(name, url, self.connections())
        if problem is not None:
            self.say(problem)
            return
        conn = SavedConnection(
            new_id(name, (c.id for c in self.connections())), name, url, has_key=bool(key)
        )
        if conn.needs_confirmation:
            self._ask_insecure(conn, key)
            return
        self._add(conn, key)

    def _ask_insecure(self, conn: SavedConnection, key: str) -> None:
        box = QMessageBox(
            QMessageBox.Icon.Warning,
            "Unencrypted connection",
            f"{conn.url} is plain http:// to another computer: "
            + ("the API key and " if key else "")
            + "every message would travel unencrypted. Use it only on a network you trust.",
            QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.Cancel,
            self,
        )
        box.setObjectName("engines-confirm-insecure")
        box.button(QMessageBox.StandardButton.Yes).setText("Use it unencrypted")

        def answered(result: int) -> None:
            self._confirm = None
            if result == QMessageBox.StandardButton.Yes:
                self._add(replace(conn, allow_insecure=True), key)
            else:
                self.say(f"{conn.name} was not added: use https:// for another computer.")

        box.finished.connect(answered)
        self._confirm = box
        box.open()

    def confirmation(self) -> QMessageBox | None:
        """The open question about plain http:// (None: none asked)."""
        return self._confirm

    def _add(self, conn: SavedConnection, key: str) -> None:
        if not self._store((*self.connections(), conn)):
            return
        self.key_edit.clear()
        self.name_edit.clear()
        self.url_edit.clear()
        self.select(conn.id)
        self.test(conn.id, new_key=key or None)

    def remove_selected(self) -> None:
        conn = self.selected()
        if conn is None:
            return
        if self._store(tuple(c for c in self.connections() if c.id != conn.id)):
            keys, cid = self._keys, conn.id
            self._jobs.submit(lambda: keys.delete(cid))  # a keyring may wait for an unlock
            self.say(f"{conn.name} was removed (its conversations stay, answered by nothing).")

    # -- test -----------------------------------------------------------------------------

    def test_selected(self) -> None:
        conn = self.selected()
        if conn is not None:
            self.test(conn.id)

    def test(self, connection_id: str, new_key: str | None = None) -> None:
        """Probe the connection on a background job; the answer comes back as a sentence
        (and, when it answers, its kind and models are saved with it). ``new_key`` is
        stored first, on that job too (a keyring may wait for an unlock)."""
        conn = next((c for c in self.connections() if c.id == connection_id), None)
        if conn is None or connection_id in self._testing:
            return
        self._testing.add(connection_id)
        self._sync_buttons()
        self.say(f"Asking {conn.name}…")
        keys, signal = self._keys, self._bridge.tested

        def job() -> None:  # on a pool thread
            result: Any
            try:
                if new_key is not None:
                    keys.set(conn.id, new_key)
                key = keys.get(conn.id) if conn.has_key else None
                result = probe_connection(conn.connection(key))
            except LlamaDeskError as exc:
                result = str(exc)
            try:
                signal.emit(conn.id, result)
            except RuntimeError:  # the page is gone
                pass

        self._jobs.submit(job)

    def testing(self) -> bool:
        return bool(self._testing)

    def _on_tested(self, connection_id: str, result: object) -> None:
        self._testing.discard(connection_id)
        conns = self.connections()
        conn = next((c for c in conns if c.id == connection_id), None)
        if conn is None:  # removed meanwhile
            self._sync_buttons()
            return
        if not isinstance(result, ServerTraits):
            self._sync_buttons()
            self.say(f"{conn.name} did not answer: {result}")
            return
        updated = with_probe(conn, result.kind.value, result.version, result.models, result.n_ctx)
        if self._store(tuple(updated if c.id == conn.id else c for c in conns)):
            self.say(found_text(conn, result))

    def shutdown(self, timeout_s: float = 15.0) -> None:
        """Wait for the tests in progress (a test's teardown)."""
        self._jobs.wait_idle(timeout_s)
