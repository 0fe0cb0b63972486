"""The main window's status bar (model, memory, speed, load progress) and narrow mode."""

from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtWidgets import QLabel, QMainWindow, QProgressBar, QToolButton

from app.remote.saved import is_address
from app.session import events as ev
from app.settings_schema import format_bytes
from app.ui.model_names import model_file_name
from app.ui.wording import plural

if TYPE_CHECKING:
    from app.ui.window_protocols import StatusWindow

# Below this width the conversation list hides (the "Chats" button brings it back) and
# the status texts shorten.
NARROW_WIDTH = 800


class WindowStatus:
    """The status bar of ``win``, and how the window follows its width (``window``: the
    window as a widget, its status bar and its width)."""

    def __init__(self, win: StatusWindow, window: QMainWindow) -> None:
        self.win = win
        self.window = window
        self.narrow = False
        self._sidebar_auto_hidden = False
        # the session's last memory figures: the restores of a load are counted before the
        # window hears that the model is loaded, and are shown then (update_model_labels)
        self._stats: ev.MemoryStats | None = None

    def build(self) -> None:
        win = self.win
        # status bar: model, memory, speed, load progress
        bar = self.window.statusBar()
        self.model_label = QLabel("No model loaded")
        self.model_label.setObjectName("status-model")
        self.memory_label = QLabel()
        self.memory_label.setObjectName("status-memory")
        self.speed_label = QLabel()
        self.speed_label.setObjectName("status-speed")
        self.load_bar = QProgressBar()
        self.load_bar.setObjectName("load-progress")
        self.load_bar.setRange(0, 1000)
        self.load_bar.setMaximumWidth(160)
        self.load_bar.setVisible(False)
        self.cancel_load_button = QToolButton()
        self.cancel_load_button.setText("Cancel")
        self.cancel_load_button.setVisible(False)
        self.cancel_load_button.clicked.connect(win.session.cancel_load)
        bar.addWidget(self.model_label, 1)
        bar.addPermanentWidget(self.load_bar)
        bar.addPermanentWidget(self.cancel_load_button)
        bar.addPermanentWidget(self.memory_label)
        bar.addPermanentWidget(self.speed_label)

    def show_loading(self, visible: bool) -> None:
        """The load progress and its Cancel button (shown while a model loads)."""
        self.load_bar.setVisible(visible)
        self.cancel_load_button.setVisible(visible)

    def on_stats(self, stats: ev.MemoryStats) -> None:
        self._stats = stats
        win = self.win
        win.total_tok_s = stats.tok_s
        busy = stats.busy
        self.speed_label.setText(
            f"{win.total_tok_s:.1f} tok/s · {busy} generating" if busy else "idle"
        )
        if win.model is not None and stats.loaded and not is_address(win.model.path):
            held = stats.kv_tokens_held
            n_ctx = stats.n_ctx
            # A sliding-window or recurrent cache holds more tokens than it has cells:
            # a fraction of cells would read as over-full.
            cells = (
                f"{held:,} / {n_ctx:,} tokens held"
                if n_ctx and held <= n_ctx
                else f"{held:,} tokens held"
            )
            self.memory_text(stats.model_bytes, stats.kv_bytes, cells)

    def update_model_labels(self) -> None:
        model = self.win.model
        if model is None:
            self.model_label.setText("No model loaded")
            self.memory_label.setText("")
            return
        info = model.info
        if is_address(model.path):
            # a remote model: no file here, no parameter count, no local memory; the
            # context each chat gets when the server says it
            name = model_file_name(model.path)
            n_ctx = model.n_ctx or info.n_ctx_train
            parts = [name, model.engine] + ([f"context {n_ctx:,}"] if n_ctx else [])
            full = " · ".join(parts)
            self.model_label.setText(name if self.narrow else full)
            self.model_label.setToolTip(full)
            self.memory_label.setText("")
            self.memory_label.setToolTip("")
            return
        n_ctx = model.n_ctx or model.settings.n_ctx
        full = (
            f"{info.display_name} · {info.params_label} · {info.file_type} · "
            f"context {n_ctx:,} × {plural(model.settings.n_seq_max, 'tab')} resident"
        )
        self.model_label.setText(info.display_name if self.narrow else full)
        self.model_label.setToolTip(full)
        self.memory_text(model.model_bytes, model.kv_bytes, None)
        if self._stats is not None and self._stats.loaded:
            self.on_stats(self._stats)  # the tokens held, as the session last said

    def memory_text(self, model_bytes: int, kv_bytes: int, cells: str | None) -> None:
        """The status bar's memory figures (short in a narrow window, all in the tooltip)."""
        full = (
            f"Model {format_bytes(float(model_bytes))} · KV cache {format_bytes(float(kv_bytes))}"
        )
        if cells:
            full += f" ({cells})"
        short = f"{format_bytes(float(model_bytes + kv_bytes))} used"
        self.memory_label.setText(short if self.narrow else full)
        self.memory_label.setToolTip(
            full + "\nMemory used by the model's weights and by the context's KV cache, and "
            "how many tokens the open chats' caches hold."
        )

    def on_busy_message(self, message: str) -> None:
        if message:
            self.window.statusBar().showMessage(message)
        else:
            self.window.statusBar().clearMessage()

    # ---------------------------------------------------------------- narrow window

    def toggle_sidebar(self) -> None:
        self.set_sidebar_visible(self.win.sidebar.isHidden())
        self._sidebar_auto_hidden = False  # the user chose: a resize does not undo it

    def set_sidebar_visible(self, visible: bool) -> None:
        win = self.win
        win.sidebar.setVisible(visible)
        win.show_sidebar_button.setVisible(not visible)
        win.sidebar_action.setChecked(visible)

    def is_narrow(self) -> bool:
        return self.window.width() < NARROW_WIDTH

    def on_resized(self) -> None:
        narrow = self.is_narrow()
        if narrow != self.narrow:
            self.narrow = narrow
            if narrow and self.win.sidebar.isVisible():
                self.set_sidebar_visible(False)
                self._sidebar_auto_hidden = True
            elif not narrow and self._sidebar_auto_hidden:
                self.set_sidebar_visible(True)
                self._sidebar_auto_hidden = False
            self.update_model_labels()
            for tab in self.win.tabs():
                tab.set_compact(narrow)
