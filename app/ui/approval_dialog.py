"""Asking before a tool runs: the server (and the program or URL it is), the tool and
its full arguments, with Allow once, Always allow this tool, and Deny.

Nothing of the call is hidden: the arguments are the JSON the tool will get, pretty
printed in a read-only box that scrolls (a long value is shown whole, never cut with an
ellipsis). "Always" is bound to the server's command line or URL by
:class:`~app.mcp.approval.ApprovalPolicy`: the dialog names that binding, so the user sees
what the permission covers. Deny is the default button and Esc denies: a key pressed by
habit never runs a tool. Each choice has a mnemonic (Alt+O, Alt+A, Alt+D).

:class:`ApprovalAsker` is the bridge for the MCP thread: its ``ask`` coroutine (what
``ApprovalPolicy.authorize`` awaits) opens the dialog on the GUI thread and waits for the
answer; a closed dialog or a stopped turn is a Deny.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable

from PySide6.QtCore import QObject, Qt, Signal, Slot
from PySide6.QtGui import QCloseEvent, QFontDatabase
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QVBoxLayout,
    QWidget,
)
from shiboken6 import isValid

from app.mcp.approval import ApprovalRequest, Decision

__all__ = ["ApprovalAsker", "ApprovalDialog", "binding_text"]


def binding_text(binding: str) -> str:
    """What a permission binding means, in words (``stdio:["cmd", ...]`` or ``http:URL``)."""
    kind, _, rest = binding.partition(":")
    if kind == "stdio":
        try:
            parts = json.loads(rest)
        except ValueError:
            return rest
        if isinstance(parts, list):
            return "runs " + " ".join(str(p) for p in parts)
    if kind == "http":
        return "at " + rest
    return binding


class ApprovalDialog(QDialog):
    """One call to approve; ``decided`` carries the :class:`Decision` (once)."""

    decided = Signal(object)  # Decision

    def __init__(self, request: ApprovalRequest, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.request = request
        self.decision: Decision | None = None
        self.setObjectName("approval-dialog")
        self.setWindowTitle(f"Run the tool {request.tool}?")
        layout = QVBoxLayout(self)
        heading = QLabel(
            f"The model wants to run the tool <b>{_html(request.tool)}</b> of the MCP server "
            f"<b>{_html(request.server)}</b>."
        )
        heading.setObjectName("approval-heading")
        heading.setWordWrap(True)
        layout.addWidget(heading)
        form = QFormLayout()
        self.server_label = QLabel(f"{request.server} ({binding_text(request.binding)})")
        self.server_label.setObjectName("approval-server")
        self.server_label.setWordWrap(True)
        self.server_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        form.addRow("Server", self.server_label)
        self.tool_label = QLabel(request.tool)
        self.tool_label.setObjectName("approval-tool")
        self.tool_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        form.addRow("Tool", self.tool_label)
        layout.addLayout(form)
        args_label = QLabel("&Arguments, exactly as the tool gets them:")
        layout.addWidget(args_label)
        self.arguments = QPlainTextEdit(request.arguments_text)
        self.arguments.setObjectName("approval-arguments")
        self.arguments.setReadOnly(True)
        self.arguments.setTextInteractionFlags(
            Qt.TextInteractionFlag.TextSelectableByMouse
            | Qt.TextInteractionFlag.TextSelectableByKeyboard
        )
        self.arguments.setAccessibleName("Arguments")
        self.arguments.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        # Wrapped at any character: a long value is all there, line after line.
        self.arguments.setWordWrapMode(self.arguments.wordWrapMode().WrapAnywhere)
        self.arguments.setMinimumSize(460, 160)
        args_label.setBuddy(self.arguments)
        layout.addWidget(self.arguments, 1)
        self.always_note = QLabel(
            f"Always allow: {request.tool} on {request.server} runs without asking from now "
            "on, while the server's command or URL stays the same."
        )
        self.always_note.setObjectName("approval-always-note")
        self.always_note.setWordWrap(True)
        self.always_note.setEnabled(False)  # muted
        layout.addWidget(self.always_note)
        buttons = QDialogButtonBox()
        self.allow_button = QPushButton("Allow &once")
        self.allow_button.setObjectName("approval-allow")
        self.always_button = QPushButton("&Always allow this tool")
        self.always_button.setObjectName("approval-always")
        self.always_button.setToolTip(
            "For this server's command or URL only: a changed one asks again"
        )
        self.deny_button = QPushButton("&Deny")
        self.deny_button.setObjectName("approval-deny")
        self.deny_button.setToolTip("The model is told the tool was not allowed to run")
        buttons.addButton(self.allow_button, QDialogButtonBox.ButtonRole.AcceptRole)
        buttons.addButton(self.always_button, QDialogButtonBox.ButtonRole.AcceptRole)
        buttons.addButton(self.deny_button, QDialogButtonBox.ButtonRole.RejectRole)
        for button in (self.allow_button, self.always_button):
            button.setAutoDefault(False)
        self.deny_button.setDefault(True)
        self.allow_button.clicked.connect(lambda: self.decide(Decision.ALLOW_ONCE))
        self.always_button.clicked.connect(lambda: self.decide(Decision.ALWAYS))
        self.deny_button.clicked.connect(lambda: self.decide(Decision.DENY))
        layout.addWidget(buttons)
        self.resize(560, 380)

    def decide(self, decision: Decision) -> None:
        if self.decision is not None:
            return
        self.decision = decision
        self.decided.emit(decision)
        if decision is Decision.DENY:
            super().reject()
        else:
            super().accept()

    def reject(self) -> None:  # Esc, the window's close button
        self.decide(Decision.DENY)

    def closeEvent(self, event: QCloseEvent) -> None:
        self.decide(Decision.DENY)
        super().closeEvent(event)


def _html(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


class _Opener(QObject):
    """Lives on the GUI thread: the MCP thread asks it to open a dialog (queued)."""

    requested = Signal(object, object)  # (ApprovalRequest, Callable[[Decision], None])


class ApprovalAsker:
    """Opens an :class:`ApprovalDialog` for each request, over ``parent``; its
    :meth:`ask` is awaited on the MCP thread. ``opened`` is told of each dialog (the
    chat shows "waiting for approval" meanwhile; tests answer it)."""

    def __init__(
        self, parent: QWidget, opened: Callable[[ApprovalDialog], None] | None = None
    ) -> None:
        self._parent = parent
        self._opened = opened
        self._opener = _Opener()
        self._opener.requested.connect(self._open)
        self._open_dialogs: list[tuple[ApprovalDialog, Callable[[Decision], None]]] = []

    async def ask(self, request: ApprovalRequest) -> Decision:
        """On the MCP thread: the user's answer (Deny when the dialog cannot be shown or
        the waiting task is cancelled: the dialog then closes)."""
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[Decision] = loop.create_future()

        def settle(decision: Decision) -> None:  # on the MCP thread
            if not answer.done():
                answer.set_result(decision)

        def answered(decision: Decision) -> None:  # on the GUI thread
            if not loop.is_closed():
                loop.call_soon_threadsafe(settle, decision)

        try:
            self._opener.requested.emit(request, answered)
        except RuntimeError:  # the window is gone
            return Decision.DENY
        try:
            return await answer
        except asyncio.CancelledError:
            try:
                self._opener.requested.emit(None, answered)  # close what is open for it
            except RuntimeError:
                pass
            raise

    @Slot(object, object)
    def _open(self, request: ApprovalRequest | None, answered: Callable[[Decision], None]) -> None:
        if request is None:  # the call was stopped: close its dialog
            for dialog, answer in list(self._open_dialogs):
                if answer is answered and isValid(dialog):
                    dialog.decide(Decision.DENY)
            return
        if not isValid(self._parent):
            answered(Decision.DENY)
            return
        dialog = ApprovalDialog(request, self._parent)
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        entry = (dialog, answered)
        self._open_dialogs.append(entry)

        def on_decided(decision: object) -> None:
            if entry in self._open_dialogs:
                self._open_dialogs.remove(entry)
            answered(decision if isinstance(decision, Decision) else Decision.DENY)

        dialog.decided.connect(on_decided)
        dialog.open()
        if self._opened is not None:
            self._opened(dialog)

    @property
    def dialogs(self) -> list[ApprovalDialog]:
        """The dialogs open now."""
        return [d for d, _ in self._open_dialogs if isValid(d)]

    def deny_all(self) -> None:
        """Deny every open request (the tab or the window closes)."""
        for dialog, answered in list(self._open_dialogs):
            if isValid(dialog):
                dialog.decide(Decision.DENY)
            else:
                answered(Decision.DENY)
        self._open_dialogs.clear()
