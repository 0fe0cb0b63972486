"""What the main window's helpers need from it: one protocol per helper.

The window (:mod:`app.ui.main_window`) imports its helpers (``welcome``, ``window_tabs``,
``window_conversations``, ``window_models``, ``window_hub``, ``window_settings``,
``window_status``, ``window_menus``, ``window_shutdown``, ``server_panel``) and gives each
itself as the protocol here; no helper imports the window, and none touches its private attributes. What
a helper needs of the window as a Qt widget (the parent of its dialogs and menus, its status
bar) it is given as a ``QMainWindow``, next to the protocol.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from app.ui.tab_host import TabHost

if TYPE_CHECKING:
    from PySide6.QtGui import QAction
    from PySide6.QtWidgets import QLabel, QProgressBar, QToolButton

    from app.engine import ContextSettings
    from app.engine.settings import ModelSettings
    from app.hub.catalog import CatalogModel
    from app.session import LoadedModel, Session
    from app.storage import AppSettings, Database, StateStore
    from app.ui.chat_tab import ChatTab
    from app.ui.downloads_panel import Downloads
    from app.ui.message_bar import MessageBar
    from app.ui.model_manager_dialog import ModelManagerDialog
    from app.ui.preferences import PreferencesDialog
    from app.ui.server_controller import ServerController
    from app.ui.settings_panel import SettingsPanel
    from app.ui.sidebar import Sidebar
    from app.ui.worker import EngineWorker


class WelcomeActions(Protocol):
    """What the welcome page's buttons do."""

    def show_model_manager(self) -> None: ...

    def choose_model_file(self) -> None: ...

    def new_tab(self) -> ChatTab | None: ...

    def start_chat_with(self, text: str) -> ChatTab | None: ...

    def load_model(self, path: str) -> None: ...

    def download_catalog(self, model: CatalogModel) -> None: ...

    def show_discover(self) -> None: ...


class TabsWindow(TabHost, Protocol):
    """What the tab widget and its tabs use of the window (the tabs are the helper's, and
    the window is their host)."""

    server: ServerController
    sidebar: Sidebar
    app_settings: AppSettings
    read_only: bool

    def enter_sends(self) -> bool: ...

    def narrow_layout(self) -> bool: ...

    def toggle_sidebar(self) -> None: ...

    def rename_conversation(self, conversation_id: int, title: str) -> None: ...

    def update_stack(self) -> None: ...

    def schedule_save_tabs(self) -> None: ...


class ConversationsWindow(Protocol):
    """What the sidebar's conversation commands use of the window."""

    session: Session
    sidebar: Sidebar
    message_bar: MessageBar

    def show_message(self, text: str, error: bool = True) -> None: ...

    def new_tab(self) -> ChatTab | None: ...

    def open_conversation(self, conversation_id: int) -> None: ...

    def delete_conversation(self, conversation_id: int) -> None: ...

    def tab_for(self, conversation_id: int) -> ChatTab | None: ...

    def remove_tab(self, tab: ChatTab) -> None: ...

    def update_stack(self) -> None: ...

    def schedule_save_tabs(self) -> None: ...


class ModelsWindow(Protocol):
    """What loading, unloading and choosing models use of the window."""

    db: Database
    session: Session
    app_settings: AppSettings
    model: LoadedModel | None
    read_only: bool
    load_bar: QProgressBar
    model_label: QLabel

    def tabs(self) -> list[ChatTab]: ...

    def show_message(self, text: str, error: bool = True) -> None: ...

    def model_path(self) -> str | None: ...

    def context_policy(self) -> str: ...

    def current_context_settings(self) -> ContextSettings: ...

    def reasoning_support(self) -> tuple[bool, bool]: ...

    def settings_panel(self) -> SettingsPanel | None: ...

    def presets(self) -> dict[str, dict[str, object]]: ...

    def load_model(self, path: str) -> None: ...

    def unload_model(self) -> None: ...

    def model_settings_for(self, path: str) -> ModelSettings: ...

    def show_discover(self) -> None: ...

    def show_model_manager(self) -> None: ...

    def choose_model_file(self) -> None: ...

    def show_loading(self, visible: bool) -> None: ...

    def update_model_labels(self) -> None: ...

    def save_app_settings(self) -> None: ...

    def update_stack(self) -> None: ...


class HubWindow(Protocol):
    """What Discover and the downloads' notices use of the window."""

    downloads: Downloads
    message_bar: MessageBar

    def current_context_settings(self) -> ContextSettings: ...

    def add_model_files(self, files: list[str]) -> None: ...

    def load_model(self, path: str) -> None: ...

    def show_discover(self) -> None: ...

    def show_downloads(self) -> None: ...


class SettingsWindow(Protocol):
    """What the settings dialogs and applying them use of the window."""

    db: Database
    session: Session
    store: StateStore
    app_settings: AppSettings
    model: LoadedModel | None
    theme_actions: dict[str, QAction]
    worker: EngineWorker

    def tabs(self) -> list[ChatTab]: ...

    def show_message(self, text: str, error: bool = True) -> None: ...

    def model_path(self) -> str | None: ...

    def any_generating(self) -> bool: ...

    def update_model_labels(self) -> None: ...

    def model_changed(self) -> None: ...

    def sync_send(self) -> None: ...


class StatusWindow(Protocol):
    """What the status bar and narrow mode use of the window."""

    session: Session
    sidebar: Sidebar
    model: LoadedModel | None
    total_tok_s: float
    show_sidebar_button: QToolButton
    sidebar_action: QAction

    def tabs(self) -> list[ChatTab]: ...


class MenusWindow(Protocol):
    """What the menu bar's actions do."""

    sidebar: Sidebar
    app_settings: AppSettings

    def enter_sends(self) -> bool: ...

    def new_tab(self) -> ChatTab | None: ...

    def close_current_tab(self) -> None: ...

    def next_tab(self) -> None: ...

    def previous_tab(self) -> None: ...

    def request_quit(self) -> None: ...

    def show_model_manager(self) -> None: ...

    def show_discover(self) -> None: ...

    def show_downloads(self) -> None: ...

    def choose_model_file(self) -> None: ...

    def unload_model(self) -> None: ...

    def open_settings(self) -> None: ...

    def open_preferences(self) -> PreferencesDialog: ...

    def toggle_sidebar(self) -> None: ...

    def set_theme(self, theme: str) -> None: ...

    def show_shortcuts(self) -> object: ...

    def show_about(self) -> object: ...


class ServerWindow(Protocol):
    """What the local server's menu and controller use of the window."""

    session: Session
    worker: EngineWorker
    model: LoadedModel | None

    def tabs(self) -> list[ChatTab]: ...


class ShutdownWindow(Protocol):
    """What closing uses of the window."""

    session: Session
    worker: EngineWorker
    server: ServerController
    sidebar: Sidebar
    downloads: Downloads
    app_settings: AppSettings

    @property
    def models_dialog(self) -> ModelManagerDialog | None: ...

    def tabs(self) -> list[ChatTab]: ...

    def save_tabs(self) -> None: ...

    def settings_panel(self) -> SettingsPanel | None: ...

    def save_app_settings(self) -> None: ...

    def stop_flushing(self) -> None: ...

    def cancel_save_tabs(self) -> None: ...
