"""A long message's token count before it is sent, under the chat tab's composer (counted
on the session thread, a while after the typing stops)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QLabel
from shiboken6 import isValid

from app.engine.errors import context_advice
from app.ui.tab_status import room_text, tokens_text

if TYPE_CHECKING:
    from app.ui.tab_protocols import HintTab

# Messages from this length on show their token count before they are sent.
TOKEN_HINT_MIN_CHARS = 400
TOKEN_COUNT_DELAY_MS = 350


class TokenHint:
    """The token count of ``tab``'s composer text (its label: ``label``)."""

    def __init__(self, tab: HintTab) -> None:
        self.tab = tab
        self.label = QLabel()
        self.label.setObjectName("token-hint")
        self.label.setWordWrap(True)
        self.label.setContentsMargins(8, 2, 8, 0)
        self.label.setVisible(False)
        self._serial = 0
        self._timer = QTimer(self.label)  # the label is the tab's: it goes with it
        self._timer.setSingleShot(True)
        self._timer.setInterval(TOKEN_COUNT_DELAY_MS)
        self._timer.timeout.connect(self._count)

    def text_changed(self) -> None:
        """The composer's text changed: count it again (when long enough)."""
        tab = self.tab
        self._serial += 1  # a count under way is stale now
        if len(tab.composer.toPlainText()) < TOKEN_HINT_MIN_CHARS or not tab.host.model_ready():
            self._timer.stop()
            self.label.setVisible(False)
            return
        self._timer.start()

    def _count(self) -> None:
        text = self.tab.composer.toPlainText()
        serial = self._serial
        self.tab.host.worker.call(
            lambda engine: len(engine.tokenize(text, False, True)),
            lambda result: self._show(serial, result),
        )

    def _show(self, serial: int, result: object) -> None:
        tab = self.tab
        if not isValid(self.label) or serial != self._serial or not isinstance(result, int):
            return
        n_ctx = tab.info.n_ctx
        reserve = tab.info.n_reserved
        room = n_ctx - reserve
        too_long = bool(n_ctx) and result > room
        if too_long:
            advice = context_advice(n_ctx, tab.host.trained_context())
            text = (
                f"This message is {tokens_text(result)}: more than the context can take "
                f"({room_text(n_ctx, reserve)}): {advice[0].upper()}{advice[1:]}."
            )
        else:
            text = f"This message is {tokens_text(result)}."
        self.label.setText(text)
        self.label.setProperty("error", too_long)
        self.label.setStyleSheet("color: #d33;" if too_long else "")
        self.label.setVisible(True)
