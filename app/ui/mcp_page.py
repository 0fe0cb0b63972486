"""Preferences ▸ Tools: the MCP servers the chats may use.

A list of the servers in the app's ``mcp.json`` (:class:`~app.ui.mcp_store.McpStore`),
each with a check box that switches it on or off; Add… (a program or a URL, see
:mod:`app.ui.mcp_server_dialog`), Import mcp.json… (another app's file, as it is; secrets
to the keyring), Remove, and Test connection, which starts or reaches the server, lists
its tools with what their definitions cost in tokens (small contexts feel it), and
closes it again. A server on plain ``http://`` to another computer is connected only
after the user says yes to a question (as for remote engines); the answer is kept in its
entry (``llamadeskAllowInsecureHttp``).

Changes are saved at once (not at OK): they are files and keyring entries of their own,
not part of the settings the dialog's OK applies. Every file and keyring action runs
as a job of the page's pool (:mod:`app.ui.background`), a server's test on the MCP loop
(:mod:`app.ui.mcp_runtime`); the page shows a sentence when it
ends, so a server that hangs or dies costs a wait for its timeout, never a frozen window.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from PySide6.QtCore import Qt, Slot
from PySide6.QtWidgets import (
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QMessageBox,
    QPushButton,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)
from shiboken6 import isValid

from app.errors import LlamaDeskError
from app.mcp.client import McpConnection, ServerStatus
from app.mcp.config import HttpServer, ServerConfig
from app.ui.background import BackgroundJobs
from app.ui.mcp_runtime import PROBE_TIMEOUT_S, McpRuntime, shared_runtime
from app.ui.mcp_server_dialog import McpServerDialog
from app.ui.mcp_store import McpStore, ServerEntry, resolved
from app.ui.theme import colors
from app.ui.tool_tokens import ToolCost, count_tools

__all__ = ["McpPage"]

log = logging.getLogger(__name__)

T = TypeVar("T")

ROLE_NAME = Qt.ItemDataRole.UserRole


class McpPage(QWidget):
    """See the module docstring. ``worker`` and ``model_ready``: the window's, to count
    tokens with the loaded model (without them, counts are estimates)."""

    def __init__(
        self,
        parent: QWidget | None = None,
        *,
        store: McpStore | None = None,
        runtime: McpRuntime | None = None,
        worker: Any = None,
        model_ready: Callable[[], bool] | None = None,
        probe_timeout_s: float = PROBE_TIMEOUT_S,
    ) -> None:
        super().__init__(parent)
        self.setObjectName("mcp-page")
        self.store = store or McpStore()
        self.runtime = runtime or shared_runtime()
        self._jobs = BackgroundJobs("mcp-settings")  # one after another: writes stay in order
        self._worker = worker
        self._model_ready = model_ready or (lambda: False)
        self._probe_timeout_s = probe_timeout_s
        self.entries: list[ServerEntry] = []
        self.statuses: dict[str, ServerStatus] = {}  # the last test of each server
        self.costs: dict[str, ToolCost] = {}
        self._busy = 0
        self._testing: set[str] = set()
        self._confirm: QMessageBox | None = None
        self._build()
        self.reload()

    @classmethod
    def for_window(cls, parent: QWidget | None) -> McpPage:
        """The page in a dialog of the window ``parent`` (its engine counts the tokens)."""
        worker = getattr(parent, "worker", None)
        ready = getattr(parent, "model_ready", None)
        return cls(parent, worker=worker, model_ready=ready if callable(ready) else None)

    # -- construction ---------------------------------------------------------------------

    def _build(self) -> None:
        layout = QVBoxLayout(self)
        intro = QLabel(
            "MCP servers give the chats tools (files, search, calendars…). Each call asks "
            "you first. Secrets (keys, tokens) are kept in the system keyring, never in "
            "mcp.json. Changes here are saved at once."
        )
        intro.setWordWrap(True)
        layout.addWidget(intro)
        self.tree = QTreeWidget()
        self.tree.setObjectName("mcp-servers")
        self.tree.setHeaderLabels(["Server", "Kind", "Runs or reaches", "Tools"])
        self.tree.setRootIsDecorated(True)
        self.tree.setAccessibleName("MCP servers")
        self.tree.itemChanged.connect(self._on_item_changed)
        self.tree.currentItemChanged.connect(lambda *_: self._update_buttons())
        layout.addWidget(self.tree, 1)
        row = QHBoxLayout()
        self.add_button = QPushButton("&Add…")
        self.add_button.setObjectName("mcp-add")
        self.add_button.clicked.connect(self.add_server)
        self.import_button = QPushButton("&Import mcp.json…")
        self.import_button.setObjectName("mcp-import")
        self.import_button.setToolTip(
            "Servers from LM Studio, Cursor or Claude Desktop: their mcp.json as it is"
        )
        self.import_button.clicked.connect(self.choose_import)
        self.test_button = QPushButton("&Test connection")
        self.test_button.setObjectName("mcp-test")
        self.test_button.setToolTip("Start or reach the server and list its tools")
        self.test_button.clicked.connect(self.test_current)
        self.edit_button = QPushButton("&Edit…")
        self.edit_button.setObjectName("mcp-edit")
        self.edit_button.setToolTip("Change the server's command, URL, variables or headers")
        self.edit_button.clicked.connect(self.edit_current)
        self.remove_button = QPushButton("&Remove")
        self.remove_button.setObjectName("mcp-remove")
        self.remove_button.clicked.connect(self.remove_current)
        self._remove_box: QMessageBox | None = None
        self.edit_dialog: McpServerDialog | None = None  # the last one Edit… opened
        for button in (
            self.add_button,
            self.import_button,
            self.edit_button,
            self.test_button,
            self.remove_button,
        ):
            row.addWidget(button)
        row.addStretch(1)
        layout.addLayout(row)
        self.status = QLabel()
        self.status.setObjectName("mcp-status")
        self.status.setWordWrap(True)
        self.status.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        layout.addWidget(self.status)
        self._update_buttons()

    # -- background work ------------------------------------------------------------------

    def busy(self) -> bool:
        return self._busy > 0

    def _in_background(self, fn: Callable[[], T], done: Callable[[T], None]) -> None:
        """``fn`` (files, keyring) off the GUI thread; ``done`` with its result, or a
        sentence shown when it raised."""
        self._busy += 1

        def finished(result: object) -> None:
            if not isValid(self):
                return
            self._busy -= 1
            if isinstance(result, LlamaDeskError):
                self.say(str(result), error=True)
            elif isinstance(result, BaseException):
                log.error("MCP settings job failed", exc_info=result)
                self.say(f"That did not work: {result}.", error=True)
            else:
                done(result)  # type: ignore[arg-type]

        self._jobs.run(fn, finished)

    def say(self, text: str, error: bool = False) -> None:
        self.status.setText(text)
        self.status.setStyleSheet(f"color: {colors(self).error};" if error else "")

    # -- the list -------------------------------------------------------------------------

    def reload(self, then: Callable[[], None] | None = None) -> None:
        """Read the servers again and show them; then ``then``."""

        def show(entries: list[ServerEntry]) -> None:
            self._show_entries(entries)
            if then is not None:
                then()

        self._in_background(self.store.entries, show)

    def _show_entries(self, entries: list[ServerEntry]) -> None:
        self.entries = entries
        current = self.current_name()
        self.tree.blockSignals(True)
        self.tree.clear()
        for entry in entries:
            item = QTreeWidgetItem([entry.name, entry.kind, entry.summary, ""])
            item.setData(0, ROLE_NAME, entry.name)
            item.setFlags(item.flags() | Qt.ItemFlag.ItemIsUserCheckable)
            item.setCheckState(
                0, Qt.CheckState.Checked if entry.enabled else Qt.CheckState.Unchecked
            )
            item.setToolTip(0, "On: the chats may use its tools")
            item.setToolTip(2, entry.summary)
            self.tree.addTopLevelItem(item)
            self._show_tools(item)
            if entry.name == current:
                self.tree.setCurrentItem(item)
        self.tree.blockSignals(False)
        first = self.tree.topLevelItem(0)
        if self.tree.currentItem() is None and first is not None:
            self.tree.setCurrentItem(first)
        for column in (0, 1):
            self.tree.resizeColumnToContents(column)
        if not entries:
            self.say("No MCP servers yet: add one, or import another app's mcp.json.")
        self._update_buttons()

    def _item(self, name: str) -> QTreeWidgetItem | None:
        for i in range(self.tree.topLevelItemCount()):
            item = self.tree.topLevelItem(i)
            if item is not None and item.data(0, ROLE_NAME) == name:
                return item
        return None

    def _show_tools(self, item: QTreeWidgetItem) -> None:
        name = str(item.data(0, ROLE_NAME))
        status = self.statuses.get(name)
        item.takeChildren()
        if name in self._testing:
            item.setText(3, "testing…")
            return
        if status is None:
            item.setText(3, "")
            return
        if not status.connected:
            item.setText(3, "failed")
            item.setToolTip(3, status.sentence)
            return
        cost = self.costs.get(name)
        total = f", {cost.text(cost.total)}" if cost is not None else ""
        item.setText(3, f"{len(status.tools)} tools{total}")
        for i, tool in enumerate(status.tools):
            tokens = cost.text(cost.tokens[i]) if cost is not None else ""
            child = QTreeWidgetItem([tool.name, "tool", tool.description, tokens])
            child.setToolTip(2, tool.description)
            item.addChild(child)
        item.setExpanded(True)

    def current_name(self) -> str | None:
        item = self.tree.currentItem()
        while item is not None and item.parent() is not None:
            item = item.parent()
        return str(item.data(0, ROLE_NAME)) if item is not None else None

    def _entry(self, name: str | None) -> ServerEntry | None:
        return next((e for e in self.entries if e.name == name), None)

    def _update_buttons(self) -> None:
        name = self.current_name()
        self.test_button.setEnabled(name is not None and name not in self._testing)
        self.remove_button.setEnabled(name is not None)
        self.edit_button.setEnabled(name is not None)

    @Slot(QTreeWidgetItem, int)
    def _on_item_changed(self, item: QTreeWidgetItem, column: int) -> None:
        if column != 0 or item.parent() is not None:
            return
        name = str(item.data(0, ROLE_NAME))
        enabled = item.checkState(0) == Qt.CheckState.Checked
        entry = self._entry(name)
        if entry is None or entry.enabled == enabled:
            return
        self._in_background(
            lambda: self.store.set_enabled(name, enabled),
            lambda _: self._saved(f"'{name}' is {'on' if enabled else 'off'}."),
        )

    def _saved(self, text: str) -> None:
        self.say(text)
        self.reload()

    # -- actions --------------------------------------------------------------------------

    @Slot()
    def add_server(self) -> McpServerDialog:
        dialog = McpServerDialog(self)
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.accepted.connect(lambda: self._on_added(dialog))
        dialog.open()
        return dialog

    def _on_added(self, dialog: McpServerDialog) -> None:
        result = dialog.result_server()
        if result is not None:
            self.save_server(*result)

    def save_server(
        self, server: ServerConfig, secret_names: list[str], replaces: ServerEntry | None = None
    ) -> None:
        """Store ``server`` (its secret values to the keyring), then test it; plain
        ``http://`` to another computer is asked about first (No: nothing is saved).
        ``replaces``: the saved server it edits (on or off as that was; a renamed one's
        old entry and secrets go)."""
        if isinstance(server, HttpServer) and server.needs_confirmation:
            self._ask_insecure(
                server.name,
                server.url,
                bool(secret_names or server.headers),
                lambda: self.save_server(
                    dataclasses.replace(server, allow_insecure_http=True), secret_names, replaces
                ),
                f"'{server.name}' was not added: use https:// for another computer.",
            )
            return
        name = server.name

        def saved(entry: ServerEntry) -> None:
            where = f"; {len(entry.secret_names)} secret(s) in {self.store.secrets.where}"
            self.say(f"Saved '{name}'{where if entry.secret_names else ''}.")
            self.statuses.pop(name, None)
            self.reload(then=lambda: self.test(name))

        store = self.store

        def put() -> ServerEntry:
            enabled = replaces.enabled if replaces is not None else True
            entry = store.put(server, secret_names, enabled=enabled)
            if replaces is not None and replaces.name != name:
                store.remove(replaces.name)  # after the new one is written: nothing lost
            return entry

        if replaces is not None:
            self.statuses.pop(replaces.name, None)
        self._in_background(put, saved)

    @Slot()
    def choose_import(self) -> QFileDialog:
        dialog = QFileDialog(self, "Import an mcp.json", str(Path.home()), "JSON (*.json)")
        dialog.setFileMode(QFileDialog.FileMode.ExistingFile)
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.fileSelected.connect(lambda path: self.import_file(Path(path)))
        dialog.open()
        return dialog

    def import_file(self, path: Path) -> None:
        def imported(result: tuple[list[str], int]) -> None:
            names, secrets = result
            moved = (
                f" {secrets} secret value(s) went to {self.store.secrets.where}." if secrets else ""
            )
            listed = ", ".join(f"'{n}'" for n in names) or "no servers"
            self._saved(f"Imported {listed} from {path}.{moved}")

        self._in_background(lambda: self.store.import_file(path), imported)

    @Slot()
    def edit_current(self) -> None:
        """Open the selected server in the dialog, its secret values read back from the
        store (off the GUI thread: a keyring may take a while)."""
        entry = self._entry(self.current_name())
        if entry is None:
            return
        store = self.store

        def show(result: tuple[ServerConfig, list[str]]) -> None:
            dialog = McpServerDialog(self)
            dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
            dialog.set_server(result[0], entry.secret_names)
            dialog.accepted.connect(lambda: self._on_edited(dialog, entry))
            self.edit_dialog = dialog
            dialog.open()

        self._in_background(lambda: resolved(entry, store.secrets), show)

    def _on_edited(self, dialog: McpServerDialog, old: ServerEntry) -> None:
        result = dialog.result_server()
        if result is None:
            return
        server, secret_names = result
        renamed = server.name != old.name
        if renamed and self._entry(server.name) is not None:
            self.say(f"A server is already called '{server.name}': choose another name.", True)
            return
        self.save_server(server, secret_names, old)

    @Slot()
    def remove_current(self) -> None:
        """Ask, then remove the selected server (its secrets too)."""
        name = self.current_name()
        if name is None:
            return
        box = QMessageBox(
            QMessageBox.Icon.Question,
            "Remove the MCP server",
            f"Remove the MCP server '{name}'? Its settings and its secrets in "
            f"{self.store.secrets.where} are deleted; the chats lose its tools.",
            QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.Cancel,
            self,
        )
        box.setObjectName("mcp-remove-confirm")
        box.button(QMessageBox.StandardButton.Yes).setText("Remove")
        box.setDefaultButton(QMessageBox.StandardButton.Cancel)

        def answered(result: int) -> None:
            self._remove_box = None
            if result == QMessageBox.StandardButton.Yes:
                self.remove(name)

        box.finished.connect(answered)
        self._remove_box = box
        box.open()

    def remove_question(self) -> QMessageBox | None:
        """The open "Remove the MCP server?" question (None: none asked)."""
        return self._remove_box

    def remove(self, name: str) -> None:
        self.statuses.pop(name, None)
        self._in_background(
            lambda: self.store.remove(name), lambda _: self._saved(f"Removed '{name}'.")
        )

    @Slot()
    def test_current(self) -> None:
        name = self.current_name()
        if name is not None:
            self.test(name)

    def test(self, name: str) -> None:
        """Connect ``name`` once (secrets from the keyring), list its tools and count them."""
        entry = self._entry(name)
        if entry is None or name in self._testing:
            return
        server = entry.server
        if isinstance(server, HttpServer) and server.needs_confirmation:
            # An imported or hand-written entry: ask before anything is sent to it.
            def allowed() -> None:
                self._in_background(
                    lambda: self.store.allow_insecure_http(name),
                    lambda _: self.reload(then=lambda: self.test(name)),
                )

            self._ask_insecure(
                name,
                server.url,
                bool(entry.secret_names or server.headers),
                allowed,
                f"'{name}' was not connected: use https:// for another computer.",
            )
            return
        self._testing.add(name)
        self._busy += 1
        item = self._item(name)
        if item is not None:
            self._show_tools(item)
        self._update_buttons()
        self.say(f"Testing '{name}'…")
        self.runtime.submit(
            _test(self.runtime, self.store, entry, self._probe_timeout_s),
            lambda result: self._on_tested(name, result),
        )

    def _ask_insecure(
        self, name: str, url: str, has_secrets: bool, then: Callable[[], None], refused: str
    ) -> None:
        """Ask whether plain ``http://`` to another computer may be used; ``then`` on yes,
        the sentence ``refused`` on no."""
        box = QMessageBox(
            QMessageBox.Icon.Warning,
            "Unencrypted connection",
            f"The MCP server '{name}' at {url} is plain http:// to another computer: "
            + ("its keys, " if has_secrets else "")
            + "every tool call and every result would travel unencrypted. Use it only on a "
            "network you trust.",
            QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.Cancel,
            self,
        )
        box.setObjectName("mcp-confirm-insecure")
        box.button(QMessageBox.StandardButton.Yes).setText("Use it unencrypted")

        def answered(result: int) -> None:
            self._confirm = None
            if result == QMessageBox.StandardButton.Yes:
                then()
            else:
                self.say(refused, error=True)

        box.finished.connect(answered)
        self._confirm = box
        box.open()

    def confirmation(self) -> QMessageBox | None:
        """The open question about plain http:// (None: none asked)."""
        return self._confirm

    def _on_tested(self, name: str, result: object) -> None:
        if not isValid(self):
            return
        self._testing.discard(name)
        if isinstance(result, BaseException):
            log.error("MCP test failed", exc_info=result)
            result = ServerStatus(name, False, sentence=f"The test of '{name}' failed: {result}.")
        assert isinstance(result, ServerStatus)
        self.statuses[name] = result
        self.costs.pop(name, None)
        if not result.connected:
            self._busy -= 1
            self._tested(name, result.sentence, error=True)
            return

        def counted(cost: ToolCost) -> None:
            if not isValid(self):
                return
            self._busy -= 1
            self.costs[name] = cost
            how = " (estimated: no model is loaded)" if cost.estimated else ""
            self._tested(
                name,
                f"'{name}' works: {len(result.tools)} tools, their definitions "
                f"{cost.text(cost.total)}{how}.",
            )

        count_tools(result.tools, self._worker, self._model_ready(), counted)

    def _tested(self, name: str, text: str, error: bool = False) -> None:
        item = self._item(name)
        if item is not None:
            self._show_tools(item)
        self._update_buttons()
        self.say(text, error)


async def _test(
    runtime: McpRuntime, store: McpStore, entry: ServerEntry, timeout_s: float
) -> ServerStatus:
    server, missing = await runtime.blocking(lambda: resolved(entry, store.secrets))
    if missing:
        return ServerStatus(
            entry.name,
            False,
            sentence=f"The secret {', '.join(missing)} of '{entry.name}' is not in "
            f"{store.secrets.where}: add the server again.",
        )
    async with McpConnection(server, start_timeout=timeout_s) as connection:
        return connection.status
