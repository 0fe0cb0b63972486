"""One tool call in the chat: a block under the assistant's message with the tool's
name (and server), its status (waiting for approval, running, done, failed, denied,
stopped), the arguments it was called with, and its result, collapsed.

Everything in it is plain text (a tool's arguments and result are untrusted). The header
is a checkable button (keyboard: Tab, Space) that opens the arguments and the result.
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass

from PySide6.QtCore import Qt, Slot
from PySide6.QtGui import QFontDatabase, QPalette
from PySide6.QtWidgets import QFrame, QLabel, QSizePolicy, QVBoxLayout, QWidget

from app.mcp.client import CallOutcome
from app.ui.disclosure import disclosure_toggle, show_expanded
from app.ui.text_label import TextLabel

__all__ = ["CallState", "CallView", "ToolCallBlock", "ToolCallList", "state_of"]

# A result longer than this is cut in the block (the whole text went to the model and
# is stored).
MAX_SHOWN_RESULT = 20_000


class CallState(enum.Enum):
    CALLED = "called"  # written by the model, not run yet
    WAITING = "waiting for approval"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    DENIED = "denied"
    STOPPED = "stopped"


_ICONS = {
    CallState.CALLED: "…",
    CallState.WAITING: "⏳",
    CallState.RUNNING: "⚙",
    CallState.DONE: "✓",
    CallState.FAILED: "✗",
    CallState.DENIED: "⊘",
    CallState.STOPPED: "■",
}


def state_of(outcome: CallOutcome) -> CallState:
    """The block's state for how a call ended."""
    if outcome is CallOutcome.OK:
        return CallState.DONE
    if outcome is CallOutcome.DENIED:
        return CallState.DENIED
    if outcome in (CallOutcome.CANCELLED, CallOutcome.LOOP_STOPPED):
        return CallState.STOPPED
    return CallState.FAILED


@dataclass(frozen=True, slots=True)
class CallView:
    """What a block shows of one call."""

    call_id: str
    name: str
    arguments: str  # the JSON text the model wrote
    server: str = ""
    state: CallState = CallState.RUNNING
    result: str = ""  # what the model was given
    sentence: str = ""  # what went wrong, for the user

    def arguments_text(self) -> str:
        try:
            return json.dumps(json.loads(self.arguments), indent=2, ensure_ascii=False)
        except ValueError:
            return self.arguments


class ToolCallBlock(QFrame):
    """See the module docstring."""

    def __init__(self, view: CallView, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("tool-call")
        self.setFrameShape(QFrame.Shape.StyledPanel)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 2, 6, 4)
        layout.setSpacing(2)
        self.toggle = disclosure_toggle(
            self, "tool-call-toggle", "Show or hide the call's arguments and result"
        )
        self.toggle.toggled.connect(self._on_toggled)
        layout.addWidget(self.toggle)
        self.sentence = self._label("tool-call-sentence")
        layout.addWidget(self.sentence)
        self.body = QFrame(self)
        self.body.setObjectName("tool-call-body")
        body = QVBoxLayout(self.body)
        body.setContentsMargins(14, 0, 0, 0)
        body.setSpacing(2)
        body.addWidget(self._heading("Arguments"))
        self.arguments = self._label("tool-call-arguments", mono=True)
        body.addWidget(self.arguments)
        self.result_heading = self._heading("Result")
        body.addWidget(self.result_heading)
        self.result = self._label("tool-call-result", mono=True)
        body.addWidget(self.result)
        self.body.setVisible(False)
        layout.addWidget(self.body)
        self.view = view
        self.set_view(view)

    def _label(self, name: str, mono: bool = False) -> QLabel:
        label = TextLabel()
        label.setObjectName(name)
        label.setTextFormat(Qt.TextFormat.PlainText)  # never HTML: untrusted text
        label.setWordWrap(True)
        label.setTextInteractionFlags(
            Qt.TextInteractionFlag.TextSelectableByMouse
            | Qt.TextInteractionFlag.TextSelectableByKeyboard
        )
        label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        if mono:
            label.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        return label

    def _heading(self, text: str) -> QLabel:
        label = QLabel(text)
        palette = label.palette()
        muted = palette.color(QPalette.ColorGroup.Disabled, QPalette.ColorRole.WindowText)
        palette.setColor(QPalette.ColorRole.WindowText, muted)
        label.setPalette(palette)
        return label

    @property
    def state(self) -> CallState:
        return self.view.state

    @property
    def expanded(self) -> bool:
        return self.toggle.isChecked()

    def set_expanded(self, expanded: bool) -> None:
        self.toggle.setChecked(expanded)

    def title(self) -> str:
        return self.toggle.text()

    def set_view(self, view: CallView) -> None:
        self.view = view
        where = f" ({view.server})" if view.server else ""
        self.toggle.setText(f"{_ICONS[view.state]} {view.name}{where} — {view.state.value}")
        self.toggle.setAccessibleName(f"Tool call {view.name}, {view.state.value}")
        self.arguments.setText(view.arguments_text())
        shown = view.result
        if len(shown) > MAX_SHOWN_RESULT:
            shown = (
                shown[:MAX_SHOWN_RESULT]
                + f"\n… ({len(view.result) - MAX_SHOWN_RESULT:,} more characters)"
            )
        self.result.setText(shown)
        has_result = bool(view.result)
        self.result_heading.setVisible(has_result)
        self.result.setVisible(has_result)
        self.sentence.setText(view.sentence)
        self.sentence.setVisible(bool(view.sentence))

    @Slot(bool)
    def _on_toggled(self, expanded: bool) -> None:
        show_expanded(self.toggle, expanded)
        self.body.setVisible(expanded)


class ToolCallList(QWidget):
    """The call blocks of one assistant message, in the order of its calls."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("tool-calls")
        self._layout = QVBoxLayout(self)
        self._layout.setContentsMargins(0, 2, 0, 2)
        self._layout.setSpacing(4)
        self._blocks: dict[str, ToolCallBlock] = {}

    def set_call(self, view: CallView) -> ToolCallBlock:
        """Show ``view`` (a new block for a new call id, else the block updated)."""
        block = self._blocks.get(view.call_id)
        if block is None:
            block = ToolCallBlock(view, self)
            self._blocks[view.call_id] = block
            self._layout.addWidget(block)
        else:
            block.set_view(view)
        self.setVisible(True)
        return block

    def block(self, call_id: str) -> ToolCallBlock | None:
        return self._blocks.get(call_id)

    def blocks(self) -> list[ToolCallBlock]:
        return list(self._blocks.values())

    def clear(self) -> None:
        for block in self._blocks.values():
            self._layout.removeWidget(block)
            block.deleteLater()
        self._blocks.clear()
        self.setVisible(False)
