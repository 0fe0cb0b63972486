"""Add (or change) one MCP server: a stdio one (command, arguments, environment) or a
Streamable HTTP one (URL, headers). Each variable or header row says whether its value is
a secret (kept in the keyring, never in ``mcp.json``): ticked for names that look like
one (``API_KEY``, ``Authorization`` ...), and the value is then masked as it is typed.

The dialog checks what it builds as a file's entry would be checked (the same sentences);
it writes nothing: the page stores the accepted server.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable

from PySide6.QtCore import Slot
from PySide6.QtWidgets import (
    QButtonGroup,
    QCheckBox,
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QPushButton,
    QRadioButton,
    QStackedWidget,
    QTableWidget,
    QVBoxLayout,
    QWidget,
)

from app.mcp.config import McpConfigError, ServerConfig, StdioServer
from app.ui.mcp_store import http_server, looks_secret, stdio_server
from app.ui.theme import colors

__all__ = ["McpServerDialog", "PairsTable"]


class PairsTable(QTableWidget):
    """Rows of name, value and "secret" (environment variables or headers)."""

    def __init__(self, what: str, parent: QWidget | None = None) -> None:
        super().__init__(0, 3, parent)
        self.setHorizontalHeaderLabels([what, "Value", "Secret"])
        header = self.horizontalHeader()
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(1, QHeaderView.ResizeMode.Stretch)
        header.setSectionResizeMode(2, QHeaderView.ResizeMode.ResizeToContents)
        self.verticalHeader().setVisible(False)
        self.setMinimumHeight(110)

    def add_row(self, name: str = "", value: str = "", secret: bool | None = None) -> int:
        row = self.rowCount()
        self.insertRow(row)
        name_edit = QLineEdit(name)
        value_edit = QLineEdit(value)
        check = QCheckBox()
        check.setToolTip("Kept in the system keyring, never written to mcp.json")
        check.setAccessibleName("Secret")

        def on_secret(checked: bool) -> None:
            value_edit.setEchoMode(
                QLineEdit.EchoMode.Password if checked else QLineEdit.EchoMode.Normal
            )

        def on_name(text: str) -> None:
            if not check.property("chosen"):  # the user's own tick wins over the guess
                check.setChecked(looks_secret(text))

        check.toggled.connect(on_secret)
        check.clicked.connect(lambda: check.setProperty("chosen", True))
        name_edit.textEdited.connect(on_name)
        check.setChecked(looks_secret(name) if secret is None else secret)
        on_secret(check.isChecked())
        self.setCellWidget(row, 0, name_edit)
        self.setCellWidget(row, 1, value_edit)
        self.setCellWidget(row, 2, check)
        return row

    def _edit(self, row: int, column: int) -> QLineEdit:
        widget = self.cellWidget(row, column)
        assert isinstance(widget, QLineEdit)
        return widget

    def rows(self) -> list[tuple[str, str, bool]]:
        """(name, value, secret) of each row with a name."""
        out = []
        for row in range(self.rowCount()):
            check = self.cellWidget(row, 2)
            name = self._edit(row, 0).text().strip()
            if name:
                secret = isinstance(check, QCheckBox) and check.isChecked()
                out.append((name, self._edit(row, 1).text(), secret))
        return out

    def remove_current(self) -> None:
        if self.currentRow() >= 0:
            self.removeRow(self.currentRow())


class McpServerDialog(QDialog):
    """See the module docstring (saving a server of a name already there replaces it)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("mcp-server-dialog")
        self.setWindowTitle("MCP server")
        self._result: tuple[ServerConfig, list[str]] | None = None
        outer = QVBoxLayout(self)
        form = QFormLayout()
        self.name_edit = QLineEdit()
        self.name_edit.setObjectName("mcp-name")
        self.name_edit.setPlaceholderText("files, search, calendar…")
        form.addRow("&Name", self.name_edit)
        kinds = QHBoxLayout()
        self.stdio_radio = QRadioButton("&Program (stdio)")
        self.stdio_radio.setObjectName("mcp-kind-stdio")
        self.http_radio = QRadioButton("&URL (Streamable HTTP)")
        self.http_radio.setObjectName("mcp-kind-http")
        group = QButtonGroup(self)
        group.addButton(self.stdio_radio)
        group.addButton(self.http_radio)
        kinds.addWidget(self.stdio_radio)
        kinds.addWidget(self.http_radio)
        kinds.addStretch(1)
        form.addRow("Kind", kinds)
        outer.addLayout(form)

        self.stack = QStackedWidget()
        stdio = QWidget()
        stdio_form = QFormLayout(stdio)
        stdio_form.setContentsMargins(0, 0, 0, 0)
        self.command_edit = QLineEdit()
        self.command_edit.setObjectName("mcp-command")
        self.command_edit.setPlaceholderText("npx, uvx, python, /path/to/server")
        stdio_form.addRow("&Command", self.command_edit)
        self.args_edit = QLineEdit()
        self.args_edit.setObjectName("mcp-args")
        self.args_edit.setPlaceholderText('-y @modelcontextprotocol/server-filesystem "/my files"')
        self.args_edit.setToolTip("As in a shell: spaces separate, quotes group.")
        stdio_form.addRow("&Arguments", self.args_edit)
        self.env_table = PairsTable("Variable")
        self.env_table.setObjectName("mcp-env")
        stdio_form.addRow("Environment", self._with_buttons(self.env_table))
        note = QLabel("The program gets only these variables (and a minimal PATH).")
        note.setWordWrap(True)
        stdio_form.addRow("", note)
        self.stack.addWidget(stdio)
        http = QWidget()
        http_form = QFormLayout(http)
        http_form.setContentsMargins(0, 0, 0, 0)
        self.url_edit = QLineEdit()
        self.url_edit.setObjectName("mcp-url")
        self.url_edit.setPlaceholderText("https://example.com/mcp")
        http_form.addRow("U&RL", self.url_edit)
        self.headers_table = PairsTable("Header")
        self.headers_table.setObjectName("mcp-headers")
        http_form.addRow("Headers", self._with_buttons(self.headers_table))
        self.stack.addWidget(http)
        outer.addWidget(self.stack, 1)
        self.stdio_radio.toggled.connect(lambda on: self.stack.setCurrentIndex(0 if on else 1))

        self.status = QLabel()
        self.status.setObjectName("mcp-dialog-status")
        self.status.setWordWrap(True)
        outer.addWidget(self.status)
        buttons = QDialogButtonBox(
            QDialogButtonBox.StandardButton.Save | QDialogButtonBox.StandardButton.Cancel
        )
        self.save_button = buttons.button(QDialogButtonBox.StandardButton.Save)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        outer.addWidget(buttons)
        self.resize(560, 420)
        self.stdio_radio.setChecked(True)

    def set_server(self, server: ServerConfig, secret_names: Iterable[str]) -> None:
        """Fill the fields with a saved server (to edit it; its secret values as stored)."""
        secrets = set(secret_names)
        self.setWindowTitle(f"MCP server '{server.name}'")
        self.name_edit.setText(server.name)
        if isinstance(server, StdioServer):
            self.stdio_radio.setChecked(True)
            self.command_edit.setText(server.command)
            self.args_edit.setText(shlex.join(server.args))
            pairs, table = server.env, self.env_table
        else:
            self.http_radio.setChecked(True)
            self.url_edit.setText(server.url)
            pairs, table = server.headers, self.headers_table
        table.setRowCount(0)
        for name, value in pairs.items():
            table.add_row(name, value, name in secrets)

    def _with_buttons(self, table: PairsTable) -> QWidget:
        box = QWidget()
        layout = QVBoxLayout(box)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(table)
        row = QHBoxLayout()
        add = QPushButton("Add row")
        add.clicked.connect(lambda: table.add_row())
        remove = QPushButton("Remove row")
        remove.clicked.connect(table.remove_current)
        row.addWidget(add)
        row.addWidget(remove)
        row.addStretch(1)
        layout.addLayout(row)
        return box

    def server(self) -> tuple[ServerConfig, list[str]]:
        """The server as entered and the names of its secret values
        (:class:`McpConfigError` with a sentence when something is wrong)."""
        name = self.name_edit.text().strip()
        if not name:
            raise McpConfigError("Give the server a name.")
        if self.stdio_radio.isChecked():
            try:
                args = shlex.split(self.args_edit.text())
            except ValueError as exc:
                raise McpConfigError(f"The arguments cannot be read: {exc}.") from None
            rows = self.env_table.rows()
            env = {n: v for n, v, _ in rows}
            server: ServerConfig = stdio_server(name, self.command_edit.text().strip(), args, env)
        else:
            rows = self.headers_table.rows()
            server = http_server(name, self.url_edit.text().strip(), {n: v for n, v, _ in rows})
        return server, [n for n, _, secret in rows if secret]

    def result_server(self) -> tuple[ServerConfig, list[str]] | None:
        """What was saved (after ``accepted``)."""
        return self._result

    @Slot()
    def accept(self) -> None:
        try:
            self._result = self.server()
        except McpConfigError as exc:
            self.status.setText(str(exc))
            self.status.setStyleSheet(f"color: {colors(self).error};")
            return
        super().accept()
