"""The main window: sidebar, chat tabs, message bar, status bar, panels, shutdown."""

from __future__ import annotations

import base64
import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QByteArray, QPoint, Qt, QTimer, Signal, Slot
from PySide6.QtGui import (
    QAction,
    QActionGroup,
    QCloseEvent,
    QDragEnterEvent,
    QDropEvent,
    QKeySequence,
    QResizeEvent,
)
from PySide6.QtWidgets import (
    QDialog,
    QFileDialog,
    QFrame,
    QHBoxLayout,
    QInputDialog,
    QLabel,
    QMainWindow,
    QMenu,
    QMessageBox,
    QProgressBar,
    QSplitter,
    QStackedWidget,
    QTabWidget,
    QToolBar,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app import paths
from app.engine import ContextSettings, ModelInfo
from app.errors import LlamaDeskError
from app.session import ContextFullPolicy, LoadedModel, Session
from app.session import events as ev
from app.settings_schema import format_bytes
from app.storage import AppSettings, Database, StateStore, Tab, load_settings, save_settings
from app.storage.export import ExportFormat
from app.ui.chat_tab import ChatTab, chat_messages
from app.ui.downloads_panel import Downloads
from app.ui.export_import import TransferOutcome
from app.ui.message_bar import MessageBar
from app.ui.model_picker import ModelPicker
from app.ui.server_panel import install_server_menu
from app.ui.sidebar import Sidebar
from app.ui.theme import THEME_LABELS, THEMES, apply_theme, current_theme
from app.ui.welcome import WelcomePage
from app.ui.worker import EngineWorker

if TYPE_CHECKING:
    from app.hub.catalog import CatalogModel
    from app.ui.discover import DiscoverDialog
    from app.ui.downloads_dialog import DownloadsDialog
    from app.ui.model_manager import ModelManager, ModelManagerDialog
    from app.ui.preferences import PreferencesDialog
    from app.ui.settings_panel import SettingsPanel

log = logging.getLogger(__name__)

FLUSH_INTERVAL_MS = 30  # streamed text is painted at most ~33 times a second
# Below this width the conversation list hides (the "Chats" button brings it back) and
# the status texts shorten.
NARROW_WIDTH = 800
SHUTDOWN_TIMEOUT_MS = 1500  # the worker gets this long to save the tabs' states
DELETE_BATCH_S = 1.0  # deletes this close together are one Undo
PURGE_AFTER_S = 7 * 86400  # deleted conversations are purged for good after a week


TAB_TITLE_CHARS = 24
FORK_SUFFIX = " (fork)"


def tab_label(title: str, limit: int = TAB_TITLE_CHARS) -> str:
    """A tab's text: the title cut with an ellipsis, a fork's "(fork)" kept visible."""
    suffix = FORK_SUFFIX if title.endswith(FORK_SUFFIX) else ""
    base = title[: len(title) - len(suffix)] if suffix else title
    room = limit - len(suffix)
    if len(base) > room:
        base = base[: room - 1].rstrip() + "…"
    return base + suffix


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
        self.app_settings = settings if settings is not None else load_settings(AppSettings)
        self.store = (
            store
            if store is not None
            else StateStore(quota_bytes=self.app_settings.state_quota_bytes)
        )
        # the session saves streaming replies on its thread (not when read-only)
        self.worker = EngineWorker(self.store, None if read_only else db)
        self.session: Session = self.worker.session
        self.model: LoadedModel | None = None
        self._loading_path: str | None = None
        self._closing = False
        self._shut_down = False
        self._quit_confirmed = False
        self._quit_box: QMessageBox | None = None
        self._help_dialog: QDialog | None = None
        self._narrow = False
        self._undo_ids: list[int] = []
        self._last_delete_at = 0.0
        self._sidebar_auto_hidden = False
        self._tabs: dict[int, ChatTab] = {}
        self._settings_panel: SettingsPanel | None = None
        self._model_manager: ModelManager | None = None
        self.models_dialog: ModelManagerDialog | None = None
        self._pending_settings: ContextSettings | None = None
        self._pending_deadline = 0.0
        self._file_dialog: QFileDialog | None = None
        self._discover: DiscoverDialog | None = None
        self._preferences: PreferencesDialog | None = None
        self._downloads_dialog: DownloadsDialog | None = None
        self.downloads = Downloads(self)
        self.downloads.finished.connect(self._on_download_finished)
        self.total_tok_s = 0.0
        self.paint_hook: Any = None  # benchmark: called with the sampled time of painted text

        self.setWindowTitle("LlamaDesk")
        self.resize(1100, 720)
        self.setAcceptDrops(True)  # a .gguf file dropped on the window joins the library
        if self.app_settings.theme != current_theme():
            apply_theme(self.app_settings.theme)
        self._build()
        self._connect_worker()
        # the local API server: a client of this window's session (started only on request)
        self.server = install_server_menu(self)
        self._flush_timer = QTimer(self)
        self._flush_timer.setInterval(FLUSH_INTERVAL_MS)
        self._flush_timer.timeout.connect(self._flush)
        self._save_tabs_timer = QTimer(self)
        self._save_tabs_timer.setSingleShot(True)
        self._save_tabs_timer.setInterval(300)
        self._save_tabs_timer.timeout.connect(self.save_tabs)

    # ================================================================ construction

    def _build(self) -> None:
        self.sidebar = Sidebar(self.db)
        self.sidebar.setObjectName("sidebar")
        self.sidebar.openRequested.connect(self.open_conversation)
        self.sidebar.renameRequested.connect(self._rename)
        self.sidebar.pinRequested.connect(self._pin)
        self.sidebar.deleteRequested.connect(self.delete_conversation)
        self.sidebar.newRequested.connect(self.new_tab)
        self.sidebar.matchOpened.connect(self._show_match)
        # export/import results go to the message bar (seen also when the list is hidden)
        self.sidebar.transfers.finished.connect(self._on_transfer_finished)
        self.sidebar.transfer_notices = False

        self.message_bar = MessageBar()
        self.tab_widget = QTabWidget()
        self.tab_widget.setObjectName("tabs")
        self.tab_widget.setTabsClosable(True)
        self.tab_widget.setMovable(True)
        self.tab_widget.setDocumentMode(True)
        self.tab_widget.tabCloseRequested.connect(self.close_tab)
        self.tab_widget.currentChanged.connect(self._on_current_changed)
        self.tab_widget.tabBar().tabMoved.connect(lambda *_: self._save_tabs_timer.start())
        self.tab_widget.setUsesScrollButtons(True)
        self.tab_widget.setElideMode(Qt.TextElideMode.ElideNone)  # tab_label() cuts titles
        tab_bar = self.tab_widget.tabBar()
        tab_bar.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        tab_bar.customContextMenuRequested.connect(self._tab_context_menu)
        corner = QWidget()
        corner_row = QHBoxLayout(corner)
        corner_row.setContentsMargins(0, 0, 0, 0)
        corner_row.setSpacing(0)
        # Every open tab in a list, for when they no longer fit in the bar.
        self.tab_list_button = QToolButton()
        self.tab_list_button.setObjectName("tab-list")
        self.tab_list_button.setText("▾")
        self.tab_list_button.setToolTip("All open chats")
        self.tab_list_button.setAutoRaise(True)
        self.tab_list_button.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        # the text is the arrow; the style's second menu arrow would be one too many
        self.tab_list_button.setStyleSheet("QToolButton::menu-indicator { image: none; }")
        self.tab_list_menu = QMenu(self.tab_list_button)
        self.tab_list_menu.aboutToShow.connect(self._fill_tab_list)
        self.tab_list_button.setMenu(self.tab_list_menu)
        plus = QToolButton()
        plus.setObjectName("new-tab-button")
        plus.setText("+")
        plus.setToolTip("New chat (Ctrl+T)")
        plus.setAutoRaise(True)
        plus.clicked.connect(self.new_tab)
        corner_row.addWidget(self.tab_list_button)
        corner_row.addWidget(plus)
        self.tab_widget.setCornerWidget(corner, Qt.Corner.TopRightCorner)
        # Brings the conversation list back when a narrow window hid it.
        self.show_sidebar_button = QToolButton()
        self.show_sidebar_button.setObjectName("show-sidebar")
        self.show_sidebar_button.setText("Chats")
        self.show_sidebar_button.setToolTip("Show the conversation list (Ctrl+B)")
        self.show_sidebar_button.setAutoRaise(True)
        self.show_sidebar_button.clicked.connect(self._toggle_sidebar)
        self.tab_widget.setCornerWidget(self.show_sidebar_button, Qt.Corner.TopLeftCorner)
        self.show_sidebar_button.setVisible(False)
        self.welcome = WelcomePage(self)
        self.stack = QStackedWidget()
        self.stack.addWidget(self.welcome)
        self.stack.addWidget(self.tab_widget)

        right = QWidget()
        rlayout = QVBoxLayout(right)
        rlayout.setContentsMargins(0, 0, 0, 0)
        rlayout.setSpacing(0)
        rlayout.addWidget(self._build_no_model_banner())
        rlayout.addWidget(self.stack, 1)
        # Window-wide notices (a model that failed to load, Undo of a delete) come below the
        # chats: showing or hiding one never moves the tab bar under the pointer.
        rlayout.addWidget(self.message_bar)

        self.splitter = QSplitter(Qt.Orientation.Horizontal)
        self.splitter.addWidget(self.sidebar)
        self.splitter.addWidget(right)
        self.splitter.setStretchFactor(1, 1)
        self.splitter.setSizes([260, 840])
        self.setCentralWidget(self.splitter)

        # status bar: model, memory, speed, load progress
        bar = self.statusBar()
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
        self.cancel_load_button.clicked.connect(self.session.cancel_load)
        bar.addWidget(self.model_label, 1)
        bar.addPermanentWidget(self.load_bar)
        bar.addPermanentWidget(self.cancel_load_button)
        bar.addPermanentWidget(self.memory_label)
        bar.addPermanentWidget(self.speed_label)

        self.model_picker = ModelPicker(self.db)
        self.model_picker.loadRequested.connect(self.load_model)
        self.model_picker.unloadRequested.connect(self.unload_model)
        self.model_picker.discoverRequested.connect(self.show_discover)
        self.model_picker.managerRequested.connect(self.show_model_manager)
        self.model_picker.fileRequested.connect(self.choose_model_file)
        self.banner_button.setMenu(self.model_picker.menu())
        toolbar = QToolBar("Model")
        toolbar.setObjectName("model-toolbar")
        toolbar.setMovable(False)
        toolbar.addWidget(self.model_picker)
        self.addToolBar(Qt.ToolBarArea.TopToolBarArea, toolbar)

        self._build_actions()
        self.welcome.update_for(False, False)

    def _build_no_model_banner(self) -> QWidget:
        """Shown over the chats while no model is loaded (Send is disabled then)."""
        banner = QFrame()
        banner.setObjectName("no-model-banner")
        row = QHBoxLayout(banner)
        row.setContentsMargins(8, 4, 8, 4)
        label = QLabel("No model is loaded, so chats cannot be answered.")
        self.banner_button = QToolButton()
        self.banner_button.setObjectName("load-a-model")
        self.banner_button.setText("Load a model ▾")
        self.banner_button.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        row.addWidget(label)
        row.addWidget(self.banner_button)
        row.addStretch(1)
        banner.setVisible(False)
        self.no_model_banner = banner
        return banner

    def _action(self, text: str, slot: Any, shortcut: Any = None, name: str = "") -> QAction:
        action = QAction(text, self)
        if shortcut is not None:
            action.setShortcut(QKeySequence(shortcut))
            action.setShortcutContext(Qt.ShortcutContext.WindowShortcut)
        action.triggered.connect(slot)
        action.setObjectName(name)
        self.addAction(action)
        return action

    def _build_actions(self) -> None:
        menu = self.menuBar()
        chat = menu.addMenu("&Chat")
        chat.addAction(self._action("New chat", self.new_tab, "Ctrl+T", "new-tab"))
        chat.addAction(self._action("Close tab", self.close_current_tab, "Ctrl+W", "close-tab"))
        chat.addAction(self._action("Next tab", self.next_tab, "Ctrl+Tab", "next-tab"))
        chat.addAction(
            self._action("Previous tab", self.previous_tab, "Ctrl+Shift+Tab", "previous-tab")
        )
        chat.addAction(
            self._action("Search conversations", self.sidebar.focus_search, "Ctrl+F", "search")
        )
        chat.addSeparator()
        transfers = self.sidebar.transfers
        chat.addAction(
            self._action("Import conversations…", transfers.import_dialog, None, "import")
        )
        chat.addAction(
            self._action(
                "Export all as Markdown…",
                lambda: transfers.export(None, ExportFormat.MARKDOWN),
                None,
                "export-all-markdown",
            )
        )
        chat.addAction(
            self._action(
                "Export all as JSON…",
                lambda: transfers.export(None, ExportFormat.JSON),
                None,
                "export-all-json",
            )
        )
        chat.addSeparator()
        chat.addAction(
            self._action("Quit", self.request_quit, QKeySequence.StandardKey.Quit, "quit")
        )
        models = menu.addMenu("&Models")
        models.addAction(
            self._action("Model manager…", self.show_model_manager, "Ctrl+M", "model-manager")
        )
        models.addAction(self._action("Discover…", self.show_discover, None, "discover"))
        models.addAction(self._action("Downloads…", self.show_downloads, None, "downloads"))
        models.addAction(self._action("Load a model file…", self.choose_model_file, None, "open"))
        models.addAction(self._action("Unload the model", self.unload_model, None, "unload"))
        settings = menu.addMenu("&Settings")
        settings.addAction(
            self._action("Context settings…", self.open_settings, "Ctrl+,", "settings")
        )
        settings.addAction(self._action("Preferences…", self.open_preferences, None, "preferences"))
        view = menu.addMenu("&View")
        toggle = self._action("Conversation list", self._toggle_sidebar, "Ctrl+B", "sidebar")
        toggle.setCheckable(True)
        toggle.setChecked(True)
        view.addAction(toggle)
        self.sidebar_action = toggle
        themes = view.addMenu("&Theme")
        themes.setObjectName("theme-menu")
        group = QActionGroup(self)
        group.setExclusive(True)
        self.theme_actions: dict[str, QAction] = {}
        for name in THEMES:
            action = QAction(f"{THEME_LABELS[name]}", self)
            action.setObjectName(f"theme-{name}")
            action.setCheckable(True)
            action.setChecked(name == self.app_settings.theme)
            action.setToolTip(
                "Follow the system's light or dark setting"
                if name == "system"
                else f"Always use the {name} theme"
            )
            action.triggered.connect(lambda _checked=False, n=name: self.set_theme(n))
            group.addAction(action)
            themes.addAction(action)
            self.theme_actions[name] = action

        help_menu = menu.addMenu("&Help")
        help_menu.setObjectName("help-menu")
        help_menu.addAction(
            self._action("Keyboard shortcuts", self.show_shortcuts, "Ctrl+/", "shortcuts")
        )
        help_menu.addAction(self._action("About LlamaDesk", self.show_about, None, "about"))

    @Slot()
    def show_shortcuts(self) -> QDialog:
        from app.ui.help_dialogs import ShortcutsDialog, action_shortcuts, composer_shortcuts

        rows = action_shortcuts(self.actions()) + list(composer_shortcuts(self.enter_sends()))
        dialog = ShortcutsDialog(rows, self)
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        self._help_dialog = dialog
        dialog.open()
        return dialog

    @Slot()
    def show_about(self) -> QDialog:
        from app.ui.help_dialogs import AboutDialog

        dialog = AboutDialog(self)
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        self._help_dialog = dialog
        dialog.open()
        return dialog

    def enter_sends(self) -> bool:
        """Enter sends (Shift+Enter a new line), else Ctrl+Enter sends (a preference)."""
        return self.app_settings.send_with_enter

    def _connect_worker(self) -> None:
        # Session-wide events only: each tab subscribes to its own conversation's stream.
        self.worker.sessionEvent.connect(self._on_session_event)

    @Slot(object)
    def _on_session_event(self, event: object) -> None:
        match event:
            case ev.MemoryStats():
                self._on_stats(event)
            case ev.ModelLoadProgress():
                self._on_load_progress(event.fraction)
            case ev.ModelLoaded():
                if event.warning:
                    self.show_message(event.warning)
                self._on_model_loaded(event.model)
            case ev.ModelUnloaded():
                self._on_model_unloaded()
            case ev.ModelLoadFailed():
                self._on_load_failed(event.path, event.message)
            case ev.Reconfigured():
                self._on_reconfigured(event.model)
            case ev.ReconfigureFailed():
                self._on_reconfigure_failed(event.message)
            case ev.BusyChanged():
                self._on_busy_message(event.message)
            case ev.SessionError():
                self.show_message(event.message)
            case ev.ShutdownComplete():
                self._on_shutdown_done()

    # ================================================================ start

    def start(self, load_model: bool = True) -> None:
        """Restore the window, the tabs and the conversation list; load the model."""
        s = self.app_settings
        if s.window_geometry:
            self.restoreGeometry(QByteArray(base64.b64decode(s.window_geometry)))
        if s.window_state:
            self.restoreState(QByteArray(base64.b64decode(s.window_state)))
        if not self.read_only:
            try:
                for cid in self.db.purge_deleted(older_than_seconds=PURGE_AFTER_S):
                    self.store.delete(cid)
            except LlamaDeskError as exc:
                log.warning("purge failed: %s", exc)
        self.sidebar.refresh()
        if not self.read_only:
            self.downloads.restored.connect(self._on_downloads_restored)
            self.downloads.restore_pending()
        if s.restore_tabs:
            try:
                tabs, active = self.db.load_tabs()
            except LlamaDeskError as exc:
                self.show_message(str(exc))
                tabs, active = [], None
            for tab in tabs:
                self._add_tab(tab.conversation_id, tab.leaf_id)
            if active is not None and active in self._tabs:
                self.tab_widget.setCurrentWidget(self._tabs[active])
        self._update_stack()
        if load_model:
            path = self.initial_model_path()
            if path is not None:
                self.load_model(path)
            else:
                self._update_stack()

    def initial_model_path(self) -> str | None:
        last = self.app_settings.last_model_path
        if last and Path(last).is_file():
            return last
        demo = paths.demo_model_path()
        if demo.is_file():
            return str(demo)
        return None

    # ================================================================ host API for tabs

    def model_ready(self) -> bool:
        return self.model is not None

    def model_path(self) -> str | None:
        return self.model.path if self.model is not None else None

    def show_message(self, text: str, error: bool = True) -> None:
        self.message_bar.show_message(text, error, timeout_ms=0 if error else 8000)

    def trained_context(self) -> int:
        return self.model.info.n_ctx_train if self.model is not None else 0

    def context_policy(self) -> str:
        """What a full context does in tabs that have not chosen (the engine's default)."""
        return self.app_settings.context_full_policy

    def conversation_changed(self, conversation_id: int) -> None:
        if not self._shut_down:
            self.sidebar.schedule_refresh()
        tab = self._tabs.get(conversation_id)
        if tab is not None:
            self._update_tab_title(tab)

    def tab_state_changed(self, tab: ChatTab) -> None:
        self._update_tab_title(tab)
        generating = self.any_generating()
        if generating and not self._flush_timer.isActive():
            self._flush_timer.start()
        if self._settings_panel is not None:
            self._settings_panel.set_generating(generating)

    def any_generating(self) -> bool:
        return any(t.generating for t in self._tabs.values())

    def reasoning_support(self) -> tuple[bool, bool]:
        """Whether the loaded model's template uses (the thinking toggle, the effort)."""
        if self.model is None:
            return False, False
        return self.model.supports_thinking_toggle, self.model.supports_effort

    def fork_from(self, tab: ChatTab, message_id: int) -> None:
        try:
            conversation = self.db.fork_conversation(tab.cid, message_id)
            thread = self.db.get_thread(conversation.id)
        except LlamaDeskError as exc:
            self.show_message(str(exc))
            return
        new = self._add_tab(conversation.id, None, open_in_session=False)
        if new is None:
            return
        self.session.fork(
            tab.cid,
            conversation.id,
            chat_messages(thread),
            tab.conversation.system_prompt,
            new.tab_policy(),
        )
        self.tab_widget.setCurrentWidget(new)
        new.composer.setFocus(Qt.FocusReason.OtherFocusReason)
        self.sidebar.schedule_refresh()
        self._save_tabs_timer.start()

    # ================================================================ tabs

    def tabs(self) -> list[ChatTab]:
        out = []
        for i in range(self.tab_widget.count()):
            w = self.tab_widget.widget(i)
            if isinstance(w, ChatTab):
                out.append(w)
        return out

    def tab_for(self, conversation_id: int) -> ChatTab | None:
        return self._tabs.get(conversation_id)

    def current_tab(self) -> ChatTab | None:
        w = self.tab_widget.currentWidget()
        return w if isinstance(w, ChatTab) else None

    def _add_tab(
        self, conversation_id: int, leaf_id: int | None, open_in_session: bool = True
    ) -> ChatTab | None:
        if self.server.api_busy(conversation_id):
            self.show_message(
                "An API client is being answered in this conversation: open it when that "
                "request has finished (the Server panel's log shows it).",
                error=False,
            )
            return None
        try:
            conversation = self.db.get_conversation(conversation_id)
        except LlamaDeskError as exc:
            self.show_message(str(exc))
            return None
        tab = ChatTab(self, conversation, leaf_id)
        tab.composer.set_enter_sends(self.app_settings.send_with_enter)
        tab.set_font_size(self.app_settings.font_size)
        tab.set_compact(self._narrow)
        tab.titleChanged.connect(lambda t=tab: self._update_tab_title(t))
        self._tabs[conversation_id] = tab
        self.server.set_open_conversations(self._tabs)
        self.tab_widget.addTab(tab, "")
        self._update_tab_title(tab)
        if open_in_session:  # bound to a sequence now, or when a model is loaded
            self.session.open(conversation_id, tab.tab_policy())
        self._sync_send(tab)
        self._update_stack()
        return tab

    def _sync_send(self, tab: ChatTab | None = None) -> None:
        """Send is enabled only while a model is loaded."""
        ready = self.model_ready()
        for t in [tab] if tab is not None else self.tabs():
            t.send_button.setEnabled(ready)
            t.send_button.setToolTip(
                ("Send (Enter)" if self.enter_sends() else "Send (Ctrl+Enter)")
                if ready
                else "Load a model first (the picker in the toolbar)."
            )

    def _update_tab_title(self, tab: ChatTab) -> None:
        index = self.tab_widget.indexOf(tab)
        if index < 0:
            return
        title = tab.title
        short = tab_label(title)
        self.tab_widget.setTabText(index, ("● " if tab.generating else "") + short)
        self.tab_widget.setTabToolTip(index, title)

    @Slot()
    def new_tab(self) -> ChatTab | None:
        if self.read_only:
            self.show_message(
                "The conversation database is open read-only: new chats cannot be saved."
            )
            return None
        s = self.app_settings
        try:
            conversation = self.db.create_conversation(
                system_prompt=s.default_system_prompt,
                sampling=s.default_sampling.to_dict(),
                model_path=self.model_path(),
            )
        except LlamaDeskError as exc:
            self.show_message(str(exc))
            return None
        tab = self._add_tab(conversation.id, None)
        if tab is not None:
            self.tab_widget.setCurrentWidget(tab)
            tab.composer.setFocus()
        self.sidebar.schedule_refresh()
        self._save_tabs_timer.start()
        return tab

    def _demo_loaded(self) -> bool:
        path = self.model_path()
        return path is not None and Path(path) == paths.demo_model_path()

    def start_chat_with(self, text: str) -> ChatTab | None:
        """A new chat whose first message is ``text`` (the welcome page's suggestions)."""
        tab = self.new_tab()
        if tab is not None:
            tab.composer.setPlainText(text)
            tab.send()
        return tab

    @Slot(int)
    def open_conversation(self, conversation_id: int) -> None:
        tab = self._tabs.get(conversation_id)
        if tab is None:
            tab = self._add_tab(conversation_id, None)
            self._save_tabs_timer.start()
        if tab is not None:
            self.tab_widget.setCurrentWidget(tab)
            tab.composer.setFocus(Qt.FocusReason.OtherFocusReason)

    @Slot()
    def close_current_tab(self) -> None:
        index = self.tab_widget.currentIndex()
        if index >= 0:
            self.close_tab(index)

    @Slot(int)
    def close_tab(self, index: int) -> None:
        tab = self.tab_widget.widget(index)
        if not isinstance(tab, ChatTab):
            return
        if tab.generating:
            self.session.stop(tab.cid)
            tab.finish_for_shutdown()
        tab.save_settings()
        self.session.close(tab.cid, save=True)
        self.worker.release(tab.cid)
        self._tabs.pop(tab.cid, None)
        self.server.set_open_conversations(self._tabs)
        self.tab_widget.removeTab(index)
        empty = not tab.branch
        tab.deleteLater()
        if empty and not self.read_only:
            # An empty "New chat" that was never used does not clutter the list.
            try:
                self.db.delete_conversation(tab.cid)
                self.db.purge_deleted(older_than_seconds=PURGE_AFTER_S)
            except LlamaDeskError:
                pass
            self.sidebar.schedule_refresh()
        self._update_stack()
        self._save_tabs_timer.start()

    @Slot()
    def next_tab(self) -> None:
        n = self.tab_widget.count()
        if n:
            self.tab_widget.setCurrentIndex((self.tab_widget.currentIndex() + 1) % n)

    @Slot()
    def previous_tab(self) -> None:
        n = self.tab_widget.count()
        if n:
            self.tab_widget.setCurrentIndex((self.tab_widget.currentIndex() - 1) % n)

    @Slot(int)
    def _on_current_changed(self, _index: int) -> None:
        tab = self.current_tab()
        if tab is not None:
            tab.flush(True)
            tab.view.scroll_to_end() if tab.view.follow else None
            # Typing goes to the chat that became current (Ctrl+Tab, the sidebar, a fork).
            tab.composer.setFocus(Qt.FocusReason.OtherFocusReason)
        self.sidebar_set_current(tab)
        self._save_tabs_timer.start()

    def sidebar_set_current(self, tab: ChatTab | None) -> None:
        setter = getattr(self.sidebar, "set_current", None)
        if setter is not None:
            setter(tab.cid if tab is not None else None)

    def _update_stack(self) -> None:
        has_tabs = self.tab_widget.count() > 0
        self.stack.setCurrentIndex(1 if has_tabs else 0)
        self.welcome.update_for(
            self.model_ready(), self._loading_path is not None, self._demo_loaded()
        )
        self.no_model_banner.setVisible(
            has_tabs and not self.model_ready() and self._loading_path is None
        )
        self._sync_send()
        self._sync_picker()

    @Slot()
    def save_tabs(self) -> None:
        if self.read_only:
            return
        tabs = [Tab(t.cid, i, t.leaf_id()) for i, t in enumerate(self.tabs())]
        current = self.current_tab()
        try:
            self.db.save_tabs(tabs, current.cid if current else None)
        except LlamaDeskError as exc:
            self.show_message(str(exc))

    # ================================================================ conversations

    @Slot(int, str)
    def _rename(self, conversation_id: int, title: str) -> None:
        try:
            self.db.rename(conversation_id, title)
        except LlamaDeskError as exc:
            self.show_message(str(exc))
        tab = self._tabs.get(conversation_id)
        if tab is not None:
            tab.reload_conversation()
        self.sidebar.schedule_refresh()

    @Slot(int, bool)
    def _pin(self, conversation_id: int, pinned: bool) -> None:
        try:
            self.db.set_pinned(conversation_id, pinned)
        except LlamaDeskError as exc:
            self.show_message(str(exc))
        self.sidebar.refresh()

    @Slot(int)
    def delete_conversation(self, conversation_id: int) -> None:
        try:
            title = self.db.get_conversation(conversation_id).title or "New chat"
        except LlamaDeskError as exc:
            self.show_message(str(exc))
            return
        tab = self._tabs.get(conversation_id)
        if tab is not None:
            tab.branch = tab.branch or []  # keep the conversation even if empty
            index = self.tab_widget.indexOf(tab)
            if tab.generating:
                self.session.stop(tab.cid)
                tab.finish_for_shutdown()
            self.session.close(tab.cid, save=True)
            self.worker.release(tab.cid)
            self._tabs.pop(conversation_id, None)
            self.server.set_open_conversations(self._tabs)
            self.tab_widget.removeTab(index)
            tab.deleteLater()
            self._update_stack()
            self._save_tabs_timer.start()
        try:
            self.db.delete_conversation(conversation_id)
        except LlamaDeskError as exc:
            self.show_message(str(exc))
            return
        self.sidebar.refresh()
        # Deletes of a multi-selection arrive one by one: one Undo brings them all back.
        now = time.monotonic()
        if now - self._last_delete_at > DELETE_BATCH_S or not self.message_bar.text():
            self._undo_ids = []
        self._last_delete_at = now
        self._undo_ids.append(conversation_id)
        ids = list(self._undo_ids)
        self.message_bar.show_message(
            f"Deleted “{title}”." if len(ids) == 1 else f"Deleted {len(ids)} conversations.",
            error=False,
            action=("Undo", lambda: self._undo_delete(ids)),
            timeout_ms=15000,
        )

    def _undo_delete(self, conversation_ids: list[int]) -> None:
        self._undo_ids = []
        for conversation_id in conversation_ids:
            try:
                self.db.restore_conversation(conversation_id)
            except LlamaDeskError as exc:
                self.show_message(str(exc))
                return
        self.sidebar.refresh()
        if len(conversation_ids) == 1:  # a selection comes back to the list, not as tabs
            self.open_conversation(conversation_ids[0])

    def set_theme(self, theme: str) -> None:
        """System, light or dark: applied at once and remembered."""
        if theme not in THEMES:
            return
        action = self.theme_actions.get(theme)
        if action is not None and not action.isChecked():
            action.setChecked(True)
        if theme == self.app_settings.theme and theme == current_theme():
            return
        self.app_settings.theme = theme  # type: ignore[assignment]
        apply_theme(theme)
        self._save_settings()

    @Slot()
    def _toggle_sidebar(self) -> None:
        self._set_sidebar_visible(self.sidebar.isHidden())
        self._sidebar_auto_hidden = False  # the user chose: a resize does not undo it

    def _set_sidebar_visible(self, visible: bool) -> None:
        self.sidebar.setVisible(visible)
        self.show_sidebar_button.setVisible(not visible)
        self.sidebar_action.setChecked(visible)

    def is_narrow(self) -> bool:
        return self.width() < NARROW_WIDTH

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        narrow = self.is_narrow()
        if narrow != self._narrow:
            self._narrow = narrow
            if narrow and self.sidebar.isVisible():
                self._set_sidebar_visible(False)
                self._sidebar_auto_hidden = True
            elif not narrow and self._sidebar_auto_hidden:
                self._set_sidebar_visible(True)
                self._sidebar_auto_hidden = False
            self._update_model_labels()
            for tab in self._tabs.values():
                tab.set_compact(narrow)

    @Slot()
    def _fill_tab_list(self) -> None:
        self.tab_list_menu.clear()
        current = self.current_tab()
        for tab in self.tabs():
            action = self.tab_list_menu.addAction(("● " if tab.generating else "") + tab.title)
            action.setCheckable(True)
            action.setChecked(tab is current)
            action.triggered.connect(lambda _c=False, t=tab: self.tab_widget.setCurrentWidget(t))

    @Slot(QPoint)
    def _tab_context_menu(self, pos: QPoint) -> None:
        bar = self.tab_widget.tabBar()
        index = bar.tabAt(pos)
        tab = self.tab_widget.widget(index) if index >= 0 else None
        if not isinstance(tab, ChatTab):
            return
        menu = self.tab_menu(tab)
        menu.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        menu.popup(bar.mapToGlobal(pos))

    def tab_menu(self, tab: ChatTab) -> QMenu:
        """The tab's context menu (built for each use)."""
        menu = QMenu(self)
        menu.setObjectName("tab-menu")
        rename = menu.addAction("Rename…")
        rename.triggered.connect(lambda: self.ask_rename(tab))
        last = tab.leaf_id()
        fork = menu.addAction("Fork from the last message")
        fork.setEnabled(last is not None and not tab.generating)
        if last is not None:
            fork.triggered.connect(lambda: self.fork_from(tab, last))
        menu.addSeparator()
        self._add_export_actions(menu, [tab.cid])
        menu.addSeparator()
        close = menu.addAction("Close tab")
        close.triggered.connect(lambda: self.close_tab(self.tab_widget.indexOf(tab)))
        others = menu.addAction("Close other tabs")
        others.setEnabled(self.tab_widget.count() > 1)
        others.triggered.connect(lambda: self.close_other_tabs(tab))
        return menu

    def ask_rename(self, tab: ChatTab) -> QInputDialog:
        dialog = QInputDialog(self)
        dialog.setObjectName("rename-dialog")
        dialog.setWindowTitle("Rename chat")
        dialog.setLabelText("Title")
        dialog.setTextValue(tab.title)
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        cid = tab.cid

        def chosen(title: str) -> None:
            if title.strip():
                self._rename(cid, title.strip())

        dialog.textValueSelected.connect(chosen)
        dialog.open()
        return dialog

    def close_other_tabs(self, keep: ChatTab) -> None:
        for tab in [t for t in self.tabs() if t is not keep]:
            self.close_tab(self.tab_widget.indexOf(tab))

    def _add_export_actions(self, menu: QMenu, conversation_ids: list[int]) -> None:
        """Export entries for these conversations."""
        transfers, ids = self.sidebar.transfers, list(conversation_ids)
        menu.addAction("Export as Markdown…", lambda: transfers.export(ids, ExportFormat.MARKDOWN))
        menu.addAction("Export as JSON…", lambda: transfers.export(ids, ExportFormat.JSON))

    @Slot(int, int)
    def _show_match(self, conversation_id: int, message_id: int) -> None:
        """A search result was opened: show its message, switching to its branch if needed."""
        tab = self._tabs.get(conversation_id)
        if tab is None:
            return
        if tab.view.widget_for(message_id) is None and not tab.generating:
            try:
                leaf = self.db.leaf_of(message_id)
                self.db.set_current_leaf(conversation_id, leaf)
            except LlamaDeskError as exc:
                self.show_message(str(exc))
                return
            tab.load_thread(leaf)
        widget = tab.view.widget_for(message_id)
        if widget is not None:
            tab.view.follow = False
            tab.view.ensureWidgetVisible(widget, 0, 40)

    @Slot(object)
    def _on_transfer_finished(self, outcome: object) -> None:
        if isinstance(outcome, TransferOutcome):
            self.show_message(outcome.message, error=outcome.error)

    # ================================================================ models

    def load_model(self, path: str) -> None:
        if self._loading_path is not None:
            return
        for tab in self._tabs.values():
            if tab.generating:
                self.session.stop(tab.cid)
        self._loading_path = path
        self.load_bar.setValue(0)
        self.load_bar.setVisible(True)
        self.cancel_load_button.setVisible(True)
        self.model_label.setText(f"Loading {Path(path).name}…")
        if self._model_manager is not None:
            self._model_manager.set_loading(path, 0.0)
        self.session.load_model(
            path,
            ContextSettings.from_dict(dict(self.app_settings.context)),
            ContextFullPolicy.parse(self.context_policy()) or ContextFullPolicy.SHIFT,
        )
        self._update_stack()

    @Slot()
    def unload_model(self) -> None:
        for tab in self._tabs.values():
            if tab.generating:
                self.session.stop(tab.cid)
        self.session.unload_model()

    def _sync_picker(self) -> None:
        name = self.model.info.display_name if self.model is not None else None
        self.model_picker.set_state(self.model_path(), self._loading_path, name)

    @Slot()
    def choose_model_file(self) -> None:
        from app.ui.model_manager import start_folder

        dialog = QFileDialog(self, "Choose a GGUF model file", str(start_folder()))
        dialog.setNameFilter("GGUF models (*.gguf);;All files (*)")
        dialog.setFileMode(QFileDialog.FileMode.ExistingFile)
        dialog.fileSelected.connect(self._model_file_chosen)
        self._file_dialog = dialog
        dialog.open()

    @Slot(str)
    def _model_file_chosen(self, path: str) -> None:
        if not path:
            return
        try:
            from app.ui.model_manager import read_metadata, remember_folder

            remember_folder(Path(path).parent)

            self.db.add_model_file(path, read_metadata)
        except (ImportError, LlamaDeskError) as exc:
            log.info("not added to the library: %s", exc)
        if self._model_manager is not None:
            self._model_manager.refresh()
        self.load_model(path)

    def model_manager(self) -> ModelManager | None:
        if self._model_manager is None:
            try:
                from app.ui.model_manager import ModelManager, ModelManagerDialog
            except ImportError as exc:
                log.warning("model manager unavailable: %s", exc)
                return None
            manager = ModelManager(self.db)
            manager.loadRequested.connect(self.load_model)
            manager.unloadRequested.connect(self.unload_model)
            manager.cancelLoadRequested.connect(self.session.cancel_load)
            manager.scanFinished.connect(self._sync_picker)
            manager.set_loaded(self.model_path())
            if self._loading_path:
                manager.set_loading(self._loading_path, self.load_bar.value() / 1000)
            self.models_dialog = ModelManagerDialog(manager, self)
            self._model_manager = manager
        return self._model_manager

    @Slot()
    def show_model_manager(self) -> None:
        if self.model_manager() is None or self.models_dialog is None:
            self.choose_model_file()
            return
        self.models_dialog.show()
        self.models_dialog.raise_()
        self.models_dialog.activateWindow()

    def add_model_files(self, files: list[str]) -> None:
        """Add GGUF files to the library (their headers are read in the background)."""
        manager = self.model_manager()
        if manager is None or self.read_only:
            self.show_message("The model library cannot be changed (it is open read-only).")
            return
        manager.add_files(files)
        self.statusBar().showMessage(
            "Added to the library: " + ", ".join(Path(f).name for f in files), 5000
        )

    # ================================================================ Hub: discover, downloads

    def discover(self) -> DiscoverDialog:
        if self._discover is None:
            from app.ui.discover import DiscoverDialog

            self._discover = DiscoverDialog(self.downloads, self, self.current_context_settings)
        return self._discover

    @Slot()
    def show_discover(self) -> None:
        dialog = self.discover()
        dialog.show()
        dialog.raise_()
        dialog.activateWindow()

    def download_catalog(self, model: CatalogModel) -> None:
        """A curated model's Download button: looked up on the Hub, then queued."""
        dialog = self.discover()
        dialog.download_catalog(model)
        self.show_discover()

    def downloads_dialog(self) -> DownloadsDialog:
        """The downloads queue in a window of its own (the same queue Discover shows)."""
        if self._downloads_dialog is None:
            from app.ui.downloads_dialog import DownloadsDialog

            self._downloads_dialog = DownloadsDialog(self.downloads, self)
            self._downloads_dialog.discoverRequested.connect(self.show_discover)
        return self._downloads_dialog

    @Slot()
    def show_downloads(self) -> None:
        dialog = self.downloads_dialog()
        dialog.show()
        dialog.raise_()
        dialog.activateWindow()

    @Slot(int)
    def _on_downloads_restored(self, count: int) -> None:
        if count:
            self.message_bar.show_message(
                f"{count} download{'s' if count > 1 else ''} left unfinished: "
                "Resume continues where it stopped.",
                error=False,
                action=("Show downloads", self.show_downloads),
                timeout_ms=15000,
            )

    # ================================================================ preferences

    @Slot()
    def open_preferences(self) -> PreferencesDialog:
        if self._preferences is not None:
            self._preferences.raise_()
            self._preferences.activateWindow()
            return self._preferences
        from app.ui.preferences import open_preferences

        dialog = open_preferences(
            self, self.app_settings, self._apply_preferences, state_usage=self.store.total_bytes
        )
        dialog.finished.connect(self._on_preferences_closed)
        self._preferences = dialog
        return dialog

    @Slot(int)
    def _on_preferences_closed(self, _result: int) -> None:
        self._preferences = None

    @Slot(object)
    def _apply_preferences(self, change: object) -> None:
        """The dialog wrote ``app_settings`` and saved it; what the window shows follows.
        (Restoring tabs and the defaults of new chats are read when used; the Hub endpoint
        and token at each request.)"""
        from app.ui.preferences import PreferencesChange

        if not isinstance(change, PreferencesChange):
            return
        new, changed = change.new, change.changed
        if "theme" in changed:
            self.theme_actions[new.theme].setChecked(True)
            apply_theme(new.theme)
        if "font_size" in changed:
            for tab in self.tabs():
                tab.set_font_size(new.font_size)
        if "send_with_enter" in changed:
            for tab in self.tabs():
                tab.composer.set_enter_sends(new.send_with_enter)
            self._sync_send()
        if "state_quota_bytes" in changed:
            self.store.quota_bytes = new.state_quota_bytes  # applies at the next save

    @Slot(str)
    def _on_download_finished(self, path: str) -> None:
        self.add_model_files([path])
        self.message_bar.show_message(
            f"Downloaded {Path(path).name}; it is in the model library.",
            error=False,
            action=("Load it", lambda: self.load_model(path)),
            timeout_ms=15000,
        )

    # ================================================================ drag and drop

    @staticmethod
    def _dropped_models(event: QDragEnterEvent | QDropEvent) -> list[str]:
        mime = event.mimeData()
        if not mime.hasUrls():
            return []
        return [
            url.toLocalFile()
            for url in mime.urls()
            if url.isLocalFile() and url.toLocalFile().lower().endswith(".gguf")
        ]

    def dragEnterEvent(self, event: QDragEnterEvent) -> None:
        if self._dropped_models(event) and not self.read_only:
            event.acceptProposedAction()
        else:
            event.ignore()

    def dropEvent(self, event: QDropEvent) -> None:
        files = self._dropped_models(event)
        if not files:
            event.ignore()
            return
        event.acceptProposedAction()
        self.add_model_files(files)

    # ================================================================ settings panel

    def current_context_settings(self) -> ContextSettings:
        if self.model is not None:
            return self.model.settings
        return ContextSettings.from_dict(self.app_settings.context)

    def _model_info(self) -> ModelInfo | None:
        return self.model.info if self.model is not None else None

    def _presets(self) -> dict[str, dict[str, Any]]:
        path = self.model_path()
        if path is None:
            return {}
        try:
            return {p.name: dict(p.settings) for p in self.db.get_presets(path)}
        except LlamaDeskError as exc:
            self.show_message(str(exc))
            return {}

    @Slot()
    def open_settings(self) -> None:
        if self._settings_panel is not None:
            self._settings_panel.show()
            self._settings_panel.raise_()
            self._settings_panel.activateWindow()
            return
        try:
            from app.ui.settings_panel import SettingsPanel
        except ImportError as exc:
            self.show_message(f"The settings panel is not available ({exc}).")
            return
        panel = SettingsPanel(
            self.current_context_settings(),
            self._model_info(),
            self._presets(),
            self,
            loaded=self.model,
        )
        panel.set_generating(self.any_generating())
        panel.applyRequested.connect(self._apply_settings)
        panel.presetSaveRequested.connect(self._save_preset)
        panel.presetDeleteRequested.connect(self._delete_preset)
        panel.finished.connect(self._settings_closed)
        self._settings_panel = panel
        panel.open()

    def settings_panel(self) -> SettingsPanel | None:
        return self._settings_panel

    @Slot(int)
    def _settings_closed(self, _result: int) -> None:
        panel, self._settings_panel = self._settings_panel, None
        if panel is not None:
            panel.deleteLater()

    @Slot(object)
    def _apply_settings(self, settings: object) -> None:
        if not isinstance(settings, ContextSettings):
            return
        panel = self._settings_panel
        if self.model is None:
            self.app_settings.context = settings.to_dict()
            self._save_settings()
            if panel is not None:
                panel.set_applying(False)
                panel.set_settings(settings)
            return
        if self.current_context_settings().needs_rebuild(settings) and self.any_generating():
            # "Stop all and apply": the engine rebuilds no context while replies are being
            # written; stop them (their text so far is kept) and apply once all have ended.
            if panel is not None:
                panel.set_applying(True, "Stopping the replies, then rebuilding the context…")
            self._pending_settings = settings
            self._pending_deadline = time.monotonic() + 10.0
            self.session.stop(None)
            QTimer.singleShot(50, self._apply_when_idle)
            return
        if panel is not None:
            panel.set_applying(True, "Saving the tabs' caches and rebuilding the context…")
        self.session.reconfigure(settings)

    @Slot()
    def _apply_when_idle(self) -> None:
        settings = self._pending_settings
        if settings is None:
            return
        if self.any_generating():
            if time.monotonic() < self._pending_deadline:
                QTimer.singleShot(50, self._apply_when_idle)
                return
            self._pending_settings = None
            if self._settings_panel is not None:
                self._settings_panel.show_failed("The replies did not stop within 10 seconds.")
            return
        self._pending_settings = None
        if self._settings_panel is not None:
            self._settings_panel.set_applying(
                True, "Saving the tabs' caches and rebuilding the context…"
            )
        self.session.reconfigure(settings)

    def _on_reconfigured(self, model: LoadedModel) -> None:
        self.model = model
        self.app_settings.context = model.settings.to_dict()
        self._save_settings()
        self._update_model_labels()
        panel = self._settings_panel
        if panel is not None:
            panel.show_applied(model)
        self.statusBar().showMessage("Context settings applied; every tab was kept.", 5000)

    def _on_reconfigure_failed(self, message: str) -> None:
        panel = self._settings_panel
        if panel is not None:
            panel.show_failed(message)
        else:
            self.show_message(message)

    @Slot(str, dict)
    def _save_preset(self, name: str, settings: dict[str, Any]) -> None:
        path = self.model_path()
        if path is None:
            if self._settings_panel is not None:
                self._settings_panel.show_error("Load a model first: presets belong to a model.")
            return
        try:
            self.db.save_preset(path, name, settings)
        except LlamaDeskError as exc:
            if self._settings_panel is not None:
                self._settings_panel.show_error(str(exc))
            return
        if self._settings_panel is not None:
            self._settings_panel.set_presets(self._presets())

    @Slot(str)
    def _delete_preset(self, name: str) -> None:
        path = self.model_path()
        if path is None:
            return
        try:
            self.db.delete_preset(path, name)
        except LlamaDeskError as exc:
            self.show_message(str(exc))
        if self._settings_panel is not None:
            self._settings_panel.set_presets(self._presets())

    def _save_settings(self) -> None:
        try:
            save_settings(self.app_settings)
        except LlamaDeskError as exc:
            self.show_message(str(exc))

    # ================================================================ session events

    def _on_stats(self, stats: ev.MemoryStats) -> None:
        self.total_tok_s = stats.tok_s
        busy = stats.busy
        self.speed_label.setText(
            f"{self.total_tok_s:.1f} tok/s · {busy} generating" if busy else "idle"
        )
        if self.model is not None and stats.loaded:
            held = stats.kv_tokens_held
            n_ctx = stats.n_ctx
            # A sliding-window or recurrent cache holds more tokens than it has cells:
            # a fraction of cells would read as over-full.
            cells = (
                f"{held:,} / {n_ctx:,} tokens held"
                if n_ctx and held <= n_ctx
                else f"{held:,} tokens held"
            )
            self._memory_text(stats.model_bytes, stats.kv_bytes, cells)

    @Slot()
    def _flush(self) -> None:
        current = self.current_tab()
        hook = self.paint_hook
        for tab in self._tabs.values():
            painted = tab.flush(tab is current)
            if painted is not None and hook is not None:
                hook(painted)
        if not any(t.generating for t in self._tabs.values()):
            self._flush_timer.stop()

    def _on_model_loaded(self, model: LoadedModel) -> None:
        self.model = model
        self._loading_path = None
        self.load_bar.setVisible(False)
        self.cancel_load_button.setVisible(False)
        path = model.path
        self.app_settings.last_model_path = path
        self._save_settings()
        if not self.read_only:
            try:
                self.db.mark_used(path)
            except LlamaDeskError:
                pass
        self._update_model_labels()
        support = self.reasoning_support()
        for tab in self.tabs():  # the session bound every open conversation again
            tab.view.set_placeholder("Say hello: type a message below and press Enter.")
            tab.set_reasoning_support(*support)
        if self._model_manager is not None:
            self._model_manager.set_loading(None, 0.0)
            self._model_manager.set_loaded(path)
        if self._settings_panel is not None:
            self._settings_panel.set_loaded_model(model)
            self._settings_panel.set_settings(self.current_context_settings())
            self._settings_panel.set_presets(self._presets())
        self._update_stack()

    def _update_model_labels(self) -> None:
        model = self.model
        if model is None:
            self.model_label.setText("No model loaded")
            self.memory_label.setText("")
            return
        info = model.info
        n_ctx = model.n_ctx or model.settings.n_ctx
        full = (
            f"{info.display_name} · {info.params_label} · {info.file_type} · "
            f"context {n_ctx:,} × {model.settings.n_seq_max} tabs resident"
        )
        self.model_label.setText(info.display_name if self._narrow else full)
        self.model_label.setToolTip(full)
        self._memory_text(model.model_bytes, model.kv_bytes, None)

    def _memory_text(self, model_bytes: int, kv_bytes: int, cells: str | None) -> None:
        """The status bar's memory figures (short in a narrow window, all in the tooltip)."""
        full = (
            f"Model {format_bytes(float(model_bytes))} · KV cache {format_bytes(float(kv_bytes))}"
        )
        if cells:
            full += f" ({cells})"
        short = f"{format_bytes(float(model_bytes + kv_bytes))} used"
        self.memory_label.setText(short if self._narrow else full)
        self.memory_label.setToolTip(
            full + "\nMemory used by the model's weights and by the context's KV cache, and "
            "how many tokens the open chats' caches hold."
        )

    def _on_model_unloaded(self) -> None:
        self.model = None
        for tab in self._tabs.values():
            tab.on_info({"n_tokens": 0, "n_ctx": 0, "resident": False})
            tab.set_reasoning_support(False, False)
            if tab.generating:
                tab.finish_for_shutdown()
        self._update_model_labels()
        if self._model_manager is not None:
            self._model_manager.set_loaded(None)
        if self._settings_panel is not None:
            self._settings_panel.set_loaded_model(None)
        self._update_stack()

    def _on_load_progress(self, fraction: float) -> None:
        self.load_bar.setValue(int(fraction * 1000))
        if self._model_manager is not None and self._loading_path:
            self._model_manager.set_loading(self._loading_path, fraction)

    def _on_load_failed(self, path: str, message: str) -> None:
        self._loading_path = None
        self.load_bar.setVisible(False)
        self.cancel_load_button.setVisible(False)
        self._update_model_labels()
        self.show_message(message)
        if self._model_manager is not None:
            self._model_manager.set_loading(None, 0.0)
            self._model_manager.show_error(path, message)
        self._update_stack()

    def _on_busy_message(self, message: str) -> None:
        if message:
            self.statusBar().showMessage(message)
        else:
            self.statusBar().clearMessage()

    # ================================================================ shutdown

    def is_shut_down(self) -> bool:
        return self._shut_down

    @Slot()
    def request_quit(self) -> None:
        """Quit (the menu, Ctrl+Q): asks first while replies are being written."""
        if self._confirm_quit():
            self.close()

    def _confirm_quit(self) -> bool:
        """True when closing may go on now; else a question is asked (window-modal, the
        event loop keeps running) and a "Quit" answer closes the window."""
        writing = [t for t in self._tabs.values() if t.generating]
        if not writing or self._quit_confirmed or self._closing:
            return True
        if self._quit_box is not None:
            self._quit_box.raise_()
            return False
        n = len(writing)
        box = QMessageBox(self)
        box.setObjectName("quit-confirm")
        box.setIcon(QMessageBox.Icon.Question)
        box.setWindowTitle("Quit LlamaDesk?")
        box.setText(
            "A reply is still being written." if n == 1 else f"{n} replies are still being written."
        )
        box.setInformativeText(
            "Quitting stops it; what was written so far is kept, marked as stopped."
            if n == 1
            else "Quitting stops them; what was written so far is kept, marked as stopped."
        )
        quit_button = box.addButton("Quit", QMessageBox.ButtonRole.AcceptRole)
        quit_button.setObjectName("quit-anyway")
        keep = box.addButton("Keep writing", QMessageBox.ButtonRole.RejectRole)
        keep.setObjectName("keep-writing")
        box.setDefaultButton(keep)

        def answered(_result: int) -> None:
            self._quit_box = None
            if box.clickedButton() is quit_button:
                self._quit_confirmed = True
                self.close()
            box.deleteLater()

        box.finished.connect(answered)
        self._quit_box = box
        box.open()
        return False

    def closeEvent(self, event: QCloseEvent) -> None:
        if self._shut_down:
            event.accept()
            return
        event.ignore()
        # The window's close button asks while replies are written (as Quit does); a
        # programmatic close (the session ending, tests) does not.
        if event.spontaneous() and not self._confirm_quit():
            return
        if self._closing:
            return
        self._closing = True
        self._flush_timer.stop()
        self.session.cancel_load()  # a model still loading is given up, not waited for
        self.session.stop(None)
        for tab in self.tabs():
            tab.save_settings()
            tab.finish_for_shutdown()
        self.save_tabs()
        self.app_settings.window_geometry = base64.b64encode(
            bytes(self.saveGeometry().data())
        ).decode()
        self.app_settings.window_state = base64.b64encode(bytes(self.saveState().data())).decode()
        self._save_settings()
        self._shutdown_started = time.monotonic()
        self.server.stop()  # no request reaches a session that is shutting down
        self.worker.shutdown()
        QTimer.singleShot(SHUTDOWN_TIMEOUT_MS, self._on_shutdown_done)

    @Slot()
    def _on_shutdown_done(self) -> None:
        if self._shut_down:
            return
        self._shut_down = True
        self._flush_timer.stop()
        self._save_tabs_timer.stop()
        self.sidebar.stop_refreshing()
        self.sidebar.transfers.wait_idle(10_000)  # an export under way is finished
        self.downloads.close(0.5)  # a running download is paused, its partial file kept
        if not self.worker.join(0.5):
            log.warning("the engine thread did not stop in time")
        if self._settings_panel is not None:
            self._settings_panel.close()
        if self.models_dialog is not None:
            self.models_dialog.close()
        self.close()
        self.shutDown.emit()
