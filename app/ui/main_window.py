"""The main window: sidebar, chat tabs, message bar, status bar, panels, shutdown.

The window keeps the layout, the session's events, what its tabs ask of it
(:class:`~app.ui.tab_host.TabHost`) and thin public methods; each concern is a helper in a
module of its own: ``window_tabs`` (the open tabs are its), ``window_conversations``,
``window_models``, ``window_hub``, ``window_settings``, ``window_status`` (and narrow mode),
``window_menus`` and ``window_shutdown``. Each helper is given the window as the narrow
protocol of :mod:`app.ui.window_protocols` it needs (and, where it needs one, as a Qt
parent): the arrows go from the window to its helpers only.
"""

from __future__ import annotations

import base64
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QByteArray, QPoint, Qt, QTimer, Signal, Slot
from PySide6.QtGui import QCloseEvent, QDragEnterEvent, QDropEvent, QResizeEvent
from PySide6.QtWidgets import (
    QDialog,
    QInputDialog,
    QMainWindow,
    QMenu,
    QSplitter,
    QStackedWidget,
    QVBoxLayout,
    QWidget,
)

from app import crash_record, paths
from app.engine import ContextSettings
from app.engine.settings import ModelSettings
from app.errors import LlamaDeskError
from app.remote.saved import is_address
from app.session import LoadedModel, Session
from app.session import events as ev
from app.storage import AppSettings, Database, StateStore, load_settings
from app.ui import window_crash
from app.ui.chat_tab import ChatTab
from app.ui.door import library, settle
from app.ui.downloads_panel import Downloads
from app.ui.frame_pace import FramePace
from app.ui.mcp_runtime import shared_runtime
from app.ui.message_bar import MessageBar
from app.ui.server_panel import install_server_menu
from app.ui.sidebar import Sidebar
from app.ui.text_completion import completion_mode
from app.ui.theme import apply_theme, current_theme
from app.ui.tool_runner import ToolRunner
from app.ui.welcome import WelcomePage
from app.ui.window_conversations import PURGE_AFTER_S, WindowConversations
from app.ui.window_hub import WindowHub
from app.ui.window_menus import WindowMenus
from app.ui.window_models import WindowModels
from app.ui.window_settings import WindowSettings, saved_thread_notes
from app.ui.window_shutdown import SHUTDOWN_TIMEOUT_MS, WindowShutdown
from app.ui.window_status import WindowStatus
from app.ui.window_tabs import WindowTabs
from app.ui.worker import EngineWorker

if TYPE_CHECKING:
    from app.engine.chat_template import ReasoningDefaults
    from app.hub.catalog import CatalogModel
    from app.ui.discover import DiscoverDialog
    from app.ui.downloads_dialog import DownloadsDialog
    from app.ui.model_manager import ModelManager
    from app.ui.model_manager_dialog import ModelManagerDialog
    from app.ui.preferences import PreferencesDialog
    from app.ui.settings_panel import SettingsPanel

log = logging.getLogger(__name__)

SIDEBAR_MIN_WIDTH = 180  # the conversation list: titles and dates still readable


class MainWindow(QMainWindow):
    """See the module docstring. ``start()`` restores tabs and loads the model."""

    shutDown = Signal()  # the close finished: tabs saved, engine freed

    def __init__(
        self,
        db: Database,
        settings: AppSettings | None = None,
        store: StateStore | None = None,
        read_only: bool = False,
    ) -> None:
        super().__init__()
        self.db = db
        self.read_only = read_only
        # read before loading: the loader raises a 0 to 1 (and may write the file back)
        self._thread_notes = saved_thread_notes(paths.settings_path()) if settings is None else []
        self.app_settings = settings if settings is not None else load_settings(AppSettings)
        self.store = (
            store
            if store is not None
            else StateStore(quota_bytes=self.app_settings.state_quota_bytes)
        )
        # the session saves streaming replies on its thread (not when read-only)
        from app.ui.engines_models import window_loader  # local files and remote models

        self.worker = EngineWorker(
            self.store,
            None if read_only else db,
            window_loader(self.app_settings),
            library_database=db,  # read-only too: the window reads through it
        )
        self.session: Session = self.worker.session
        self.model: LoadedModel | None = None
        self.tabs_ui = WindowTabs(self, self)
        self.conversations_ui = WindowConversations(self)
        self.models_ui = WindowModels(self, self)
        self.hub_ui = WindowHub(self, self)
        self.settings_ui = WindowSettings(self, self)
        self.status_ui = WindowStatus(self, self)
        self.menus_ui = WindowMenus(self, self)
        self.shutdown_ui = WindowShutdown(self, self)
        self.downloads = Downloads(self)
        self.downloads.finished.connect(self.hub_ui.on_download_finished)
        self.tool_runner = ToolRunner(shared_runtime())  # the chats' MCP servers (on first use)
        self.total_tok_s = 0.0
        self.paint_hook: Any = None  # benchmark: called with the sampled time of painted text

        self.setWindowTitle("LlamaDesk")
        self.resize(1100, 720)
        self.setAcceptDrops(True)  # a .gguf file dropped on the window joins the library
        if self.app_settings.theme != current_theme():
            apply_theme(self.app_settings.theme)
        self._build()
        # Session-wide events only: each tab subscribes to its own conversation's stream.
        self.worker.sessionEvent.connect(self._on_session_event)
        # the local API server: a client of this window's session (started only on request)
        self.server = install_server_menu(self, self)
        # streamed text is painted on the screen's frames at a readable pace (frame_pace)
        self._flush_timer = QTimer(self)
        self._flush_timer.setTimerType(Qt.TimerType.PreciseTimer)
        self._flush_timer.timeout.connect(self._flush)
        self._save_tabs_timer = QTimer(self)
        self._save_tabs_timer.setSingleShot(True)
        self._save_tabs_timer.setInterval(300)
        self._save_tabs_timer.timeout.connect(self.save_tabs)

    # ================================================================ construction

    def _build(self) -> None:
        self.sidebar = Sidebar(self.db, door=library(self.session))
        self.sidebar.setObjectName("sidebar")
        self.conversations_ui.connect_sidebar()

        self.message_bar = MessageBar()
        self.tab_widget = self.tabs_ui.build()
        self.tab_list_button = self.tabs_ui.tab_list_button
        self.tab_list_menu = self.tabs_ui.tab_list_menu
        self.show_sidebar_button = self.tabs_ui.show_sidebar_button
        self.welcome = WelcomePage(self, self)
        self.stack = QStackedWidget()
        self.stack.addWidget(self.welcome)
        self.stack.addWidget(self.tab_widget)

        right = QWidget()
        rlayout = QVBoxLayout(right)
        rlayout.setContentsMargins(0, 0, 0, 0)
        rlayout.setSpacing(0)
        self.no_model_banner = self.models_ui.build_no_model_banner()
        self.banner_button = self.models_ui.banner_button
        rlayout.addWidget(self.no_model_banner)
        rlayout.addWidget(self.stack, 1)
        # Window-wide notices (a model that failed to load, Undo of a delete) come below the
        # chats: showing or hiding one never moves the tab bar under the pointer.
        rlayout.addWidget(self.message_bar)

        self.splitter = QSplitter(Qt.Orientation.Horizontal)
        self.splitter.addWidget(self.sidebar)
        self.splitter.addWidget(right)
        self.splitter.setStretchFactor(1, 1)
        # The list is hidden with Ctrl+B or by a narrow window, never dragged to a sliver:
        # a collapsed or 20 px list came back unusable (titles cut to nothing).
        self.sidebar.setMinimumWidth(SIDEBAR_MIN_WIDTH)
        self.splitter.setCollapsible(0, False)
        self.splitter.setCollapsible(1, False)
        self.splitter.setSizes([260, 840])
        self.setCentralWidget(self.splitter)

        status = self.status_ui
        status.build()
        self.model_label = status.model_label
        self.memory_label = status.memory_label
        self.speed_label = status.speed_label
        self.load_bar = status.load_bar
        self.cancel_load_button = status.cancel_load_button
        self.model_picker = self.models_ui.build_picker()

        self.menus_ui.build()
        self.theme_actions = self.menus_ui.theme_actions
        self.sidebar_action = self.menus_ui.sidebar_action
        self.welcome.update_for(False, False)

    @Slot(object)
    def _on_session_event(self, event: object) -> None:
        match event:
            case ev.MemoryStats():
                self.status_ui.on_stats(event)
            case ev.ModelLoadProgress():
                self.models_ui.on_load_progress(event.fraction)
            case ev.ModelLoaded():
                if event.warning:
                    self.show_message(event.warning)
                self.models_ui.on_model_loaded(event.model)
            case ev.ModelUnloaded():
                self.models_ui.on_model_unloaded()
            case ev.ModelLoadFailed():
                self.models_ui.on_load_failed(event.path, event.message)
            case ev.Reconfigured():
                self.settings_ui.on_reconfigured(event.model)
            case ev.ReconfigureFailed():
                self.settings_ui.on_reconfigure_failed(event.message)
            case ev.BusyChanged():
                self.status_ui.on_busy_message(event.message)
            case ev.SessionError():
                self.show_message(event.message)
            case ev.ShutdownComplete():
                self._on_shutdown_done()
            case ev.ConversationStored():  # an API client's conversation: listed soon
                self.sidebar.schedule_background_refresh()

    # ================================================================ start

    def start(self, load_model: bool = True, crash: crash_record.CrashRecord | None = None) -> None:
        """Restore the window, the tabs and the conversation list; load the model.
        ``crash``: the last session's crash (read before this one's record was kept:
        app/ui/main.py), said whether or not a model is loaded now."""
        s = self.app_settings
        if s.window_geometry:
            self.restoreGeometry(QByteArray(base64.b64decode(s.window_geometry)))
        if s.window_state:
            self.restoreState(QByteArray(base64.b64decode(s.window_state)))
        if not self.read_only:
            try:
                purge = library(self.session).purge_deleted(older_than_seconds=PURGE_AFTER_S)
                for cid in settle(purge):
                    self.store.delete(cid)
            except LlamaDeskError as exc:
                log.warning("purge failed: %s", exc)
        self.sidebar.refresh()
        for note in self._thread_notes:  # a thread count of 0 in settings.json
            self.show_message(note, error=False)
        if not self.read_only:
            self.downloads.restored.connect(self.hub_ui.on_downloads_restored)
            self.downloads.restore_pending()
        if s.restore_tabs:
            try:
                tabs, active = settle(library(self.session).load_tabs())
            except LlamaDeskError as exc:
                self.show_message(str(exc))
                tabs, active = [], None
            for tab in tabs:
                self.tabs_ui.add_tab(tab.conversation_id, tab.leaf_id)
            active_tab = self.tab_for(active) if active is not None else None
            if active_tab is not None:
                self.tab_widget.setCurrentWidget(active_tab)
        self.update_stack()
        # The last session crashed in llama.cpp: say so; that model is not loaded again
        # by itself (app/ui/window_crash.py).
        if crash is not None:
            window_crash.announce(
                self.message_bar, lambda p: self.models_ui.load_model(p, safe=True), crash
            )
        if load_model:
            path = self.initial_model_path()
            if path is not None and not window_crash.holds_back(crash, path):
                self.load_model(path)
            else:
                self.update_stack()

    def initial_model_path(self) -> str | None:
        last = self.app_settings.last_model_path
        if last and (Path(last).is_file() or is_address(last)):  # a remote model: its address
            return last
        demo = paths.demo_model_path()
        if demo.is_file():
            return str(demo)
        return None

    # ================================================================ host API for tabs

    def model_ready(self) -> bool:
        return self.model is not None

    def text_completion(self) -> bool:
        model = self.model
        value = self.settings_ui.template_value(model.path) if model is not None else ""
        return completion_mode(model, value)

    def model_path(self) -> str | None:
        return self.model.path if self.model is not None else None

    def show_message(self, text: str, error: bool = True) -> None:
        self.message_bar.show_message(text, error, timeout_ms=0 if error else 8000)

    def trained_context(self) -> int:
        return self.model.info.n_ctx_train if self.model is not None else 0

    def context_policy(self) -> str:
        """What a full context does in tabs that have not chosen (the engine's default)."""
        return self.app_settings.context_full_policy

    def enter_sends(self) -> bool:
        """Enter sends (Shift+Enter a new line), else Ctrl+Enter sends (a preference)."""
        return self.app_settings.send_with_enter

    def conversation_changed(self, conversation_id: int) -> None:
        if not self.shutdown_ui.shut_down:
            self.sidebar.schedule_refresh()
        tab = self.tab_for(conversation_id)
        if tab is not None:
            self.tabs_ui.update_tab_title(tab)

    def tab_state_changed(self, conversation_id: int) -> None:
        tab = self.tab_for(conversation_id)
        if tab is not None:
            self.tabs_ui.update_tab_title(tab)
        generating = self.any_generating()
        if generating and not self._flush_timer.isActive():
            self._flush_timer.start(self.frame_pace().interval_ms)
        panel = self.settings_panel()
        if panel is not None:
            panel.set_generating(generating)

    def any_generating(self) -> bool:
        return any(t.generating for t in self.tabs_ui.by_id.values())

    def generating_count(self) -> int:
        return sum(1 for t in self.tabs_ui.by_id.values() if t.generating)

    def loaded_model(self) -> LoadedModel | None:
        return self.model

    def model_changed(self) -> None:
        """What shows the loaded model follows a change of it (its template...)."""
        for tab in self.tabs():
            tab.show_intro()
        self.update_model_labels()

    def model_settings_for(self, path: str) -> ModelSettings:
        return self.settings_ui.model_settings_for(path)

    def reasoning_support(self) -> tuple[bool, bool]:
        """Whether the loaded model's template uses (the thinking toggle, the effort)."""
        if self.model is None:
            return False, False
        return self.model.supports_thinking_toggle, self.model.supports_effort

    def reasoning_defaults(self) -> ReasoningDefaults | None:
        """How the loaded model's template reasons by default (None: no model, unknown)."""
        return self.model.reasoning if self.model is not None else None

    def fork_from(self, tab: ChatTab, message_id: int) -> None:
        self.tabs_ui.fork_from(tab, message_id)

    def fork_tab(self, conversation_id: int, message_id: int) -> None:
        self.tabs_ui.fork_tab(conversation_id, message_id)

    def frame_pace(self) -> FramePace:
        """The streamed text's paint interval on the screen the window is on now (asked
        when a reply starts: a window moved to another screen follows at the next)."""
        screen = self.screen()
        return FramePace.for_screen(screen.refreshRate() if screen is not None else 0.0)

    @Slot()
    def _flush(self) -> None:
        current = self.current_tab()
        hook = self.paint_hook
        for tab in self.tabs_ui.by_id.values():
            painted = tab.flush(tab is current)
            if painted is not None and hook is not None:
                hook(painted)
        if not self.any_generating():
            self._flush_timer.stop()

    def stop_flushing(self) -> None:
        """No more painting of streamed text (the window closes)."""
        self._flush_timer.stop()

    def update_stack(self) -> None:
        """The welcome page or the tabs, the no-model banner, Send and the picker follow
        what is open and loaded."""
        has_tabs = self.tab_widget.count() > 0
        loading = self.models_ui.loading_path is not None
        self.stack.setCurrentIndex(1 if has_tabs else 0)
        self.welcome.update_for(self.model_ready(), loading, self.models_ui.demo_loaded())
        self.no_model_banner.setVisible(has_tabs and not self.model_ready() and not loading)
        self.tabs_ui.sync_send()
        self.models_ui.sync_picker()

    # ================================================================ tabs

    def tabs(self) -> list[ChatTab]:
        return self.tabs_ui.tabs()

    def tab_for(self, conversation_id: int) -> ChatTab | None:
        return self.tabs_ui.by_id.get(conversation_id)

    def remove_tab(self, tab: ChatTab) -> None:
        """Take the tab out, keeping its conversation (see WindowTabs.remove_tab)."""
        self.tabs_ui.remove_tab(tab)

    def sync_send(self) -> None:
        """Every tab's Send follows whether a model is loaded and which key sends."""
        self.tabs_ui.sync_send()

    def schedule_save_tabs(self) -> None:
        """Save the open tabs soon (changes close together are saved once)."""
        self._save_tabs_timer.start()

    def cancel_save_tabs(self) -> None:
        self._save_tabs_timer.stop()

    def current_tab(self) -> ChatTab | None:
        return self.tabs_ui.current_tab()

    @Slot()
    def new_tab(self) -> ChatTab | None:
        return self.tabs_ui.new_tab()

    def start_chat_with(self, text: str) -> ChatTab | None:
        """A new chat whose first message is ``text`` (the welcome page's suggestions)."""
        return self.tabs_ui.start_chat_with(text)

    @Slot(int)
    def open_conversation(self, conversation_id: int) -> None:
        self.tabs_ui.open_conversation(conversation_id)

    @Slot()
    def close_current_tab(self) -> None:
        index = self.tab_widget.currentIndex()
        if index >= 0:
            self.close_tab(index)

    @Slot(int)
    def close_tab(self, index: int) -> None:
        self.tabs_ui.close_tab(index)

    def close_other_tabs(self, keep: ChatTab) -> None:
        self.tabs_ui.close_other_tabs(keep)

    @Slot()
    def next_tab(self) -> None:
        self.tabs_ui.step_tab(1)

    @Slot()
    def previous_tab(self) -> None:
        self.tabs_ui.step_tab(-1)

    def sidebar_set_current(self, tab: ChatTab | None) -> None:
        self.tabs_ui.sidebar_set_current(tab)

    @Slot()
    def save_tabs(self) -> None:
        self.tabs_ui.save_tabs()

    @Slot()
    def _fill_tab_list(self) -> None:
        self.tabs_ui.fill_tab_list()

    @Slot(QPoint)
    def _tab_context_menu(self, pos: QPoint) -> None:
        self.tabs_ui.tab_context_menu(pos)

    def tab_menu(self, tab: ChatTab) -> QMenu:
        """The tab's context menu (built for each use)."""
        return self.tabs_ui.tab_menu(tab)

    def ask_rename(self, tab: ChatTab) -> QInputDialog:
        return self.tabs_ui.ask_rename(tab)

    @Slot(int)
    def delete_conversation(self, conversation_id: int) -> None:
        self.conversations_ui.delete_conversation(conversation_id)

    def rename_conversation(self, conversation_id: int, title: str) -> None:
        self.conversations_ui.rename(conversation_id, title)

    # ================================================================ models, Hub

    def load_model(self, path: str) -> None:
        self.models_ui.load_model(path)

    @Slot()
    def unload_model(self) -> None:
        self.models_ui.unload_model()

    @Slot()
    def choose_model_file(self) -> None:
        self.models_ui.choose_model_file()

    def model_manager(self) -> ModelManager | None:
        return self.models_ui.model_manager()

    @property
    def models_dialog(self) -> ModelManagerDialog | None:
        return self.models_ui.models_dialog

    @Slot()
    def show_model_manager(self) -> None:
        self.models_ui.show_model_manager()

    def add_model_files(self, files: list[str]) -> None:
        """Add GGUF files to the library (their headers are read in the background)."""
        self.models_ui.add_model_files(files)

    def dragEnterEvent(self, event: QDragEnterEvent) -> None:
        if self.models_ui.dropped_models(event) and not self.read_only:
            event.acceptProposedAction()
        else:
            event.ignore()

    def dropEvent(self, event: QDropEvent) -> None:
        files = self.models_ui.dropped_models(event)
        if not files:
            event.ignore()
            return
        event.acceptProposedAction()
        self.add_model_files(files)

    def discover(self) -> DiscoverDialog:
        return self.hub_ui.discover()

    @Slot()
    def show_discover(self) -> None:
        self.hub_ui.show_discover()

    def download_catalog(self, model: CatalogModel) -> None:
        """A curated model's Download button: looked up on the Hub, then queued."""
        self.hub_ui.download_catalog(model)

    def downloads_dialog(self) -> DownloadsDialog:
        """The downloads queue in a window of its own (the same queue Discover shows)."""
        return self.hub_ui.downloads_dialog()

    @Slot()
    def show_downloads(self) -> None:
        self.hub_ui.show_downloads()

    # ================================================================ settings, help

    def current_context_settings(self) -> ContextSettings:
        return self.settings_ui.current_context_settings()

    def presets(self) -> dict[str, dict[str, Any]]:
        """The loaded model's saved context presets, by name."""
        return self.settings_ui.presets()

    def save_app_settings(self) -> None:
        self.settings_ui.save_settings()

    @Slot()
    def open_settings(self) -> None:
        self.settings_ui.open_settings()

    def settings_panel(self) -> SettingsPanel | None:
        return self.settings_ui.panel

    @Slot()
    def open_preferences(self) -> PreferencesDialog:
        return self.settings_ui.open_preferences()

    @property
    def _preferences(self) -> PreferencesDialog | None:
        return self.settings_ui.preferences

    def set_theme(self, theme: str) -> None:
        """System, light or dark: applied at once and remembered."""
        self.settings_ui.set_theme(theme)

    @Slot()
    def show_shortcuts(self) -> QDialog:
        return self.menus_ui.show_shortcuts()

    @Slot()
    def show_about(self) -> QDialog:
        return self.menus_ui.show_about()

    # ================================================================ size, shutdown

    def is_narrow(self) -> bool:
        return self.status_ui.is_narrow()

    def narrow_layout(self) -> bool:
        """Whether the window is laid out narrow (it follows the width at each resize)."""
        return self.status_ui.narrow

    @Slot()
    def toggle_sidebar(self) -> None:
        self.status_ui.toggle_sidebar()

    def show_loading(self, visible: bool) -> None:
        """The status bar's load progress and its Cancel button."""
        self.status_ui.show_loading(visible)

    def update_model_labels(self) -> None:
        self.status_ui.update_model_labels()

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        self.status_ui.on_resized()

    def is_shut_down(self) -> bool:
        return self.shutdown_ui.shut_down

    @Slot()
    def request_quit(self) -> None:
        """Quit (the menu, Ctrl+Q): asks first while replies are being written."""
        self.shutdown_ui.request_quit()

    def closeEvent(self, event: QCloseEvent) -> None:
        if self.shutdown_ui.close_event(event):
            # done when the session says so (ShutdownComplete), or after the timeout
            QTimer.singleShot(SHUTDOWN_TIMEOUT_MS, self._on_shutdown_done)

    @Slot()
    def _on_shutdown_done(self) -> None:
        self.tool_runner.close()  # stdio servers end; a call under way is cancelled
        if self.shutdown_ui.on_shutdown_done():
            self.shutDown.emit()
