"""The main window's menu bar, its actions and shortcuts, and the Help menu's dialogs."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from PySide6.QtCore import Qt
from PySide6.QtGui import QAction, QActionGroup, QKeySequence
from PySide6.QtWidgets import QDialog, QMainWindow

from app.storage.export import ExportFormat
from app.ui.theme import THEME_LABELS, THEMES

if TYPE_CHECKING:
    from app.ui.window_protocols import MenusWindow


class WindowMenus:
    """The menus of ``win`` (its actions are added to ``window``, so their shortcuts work
    in it)."""

    def __init__(self, win: MenusWindow, window: QMainWindow) -> None:
        self.win = win
        self.window = window
        self._help_dialog: QDialog | None = None
        self.theme_actions: dict[str, QAction] = {}

    def action(self, text: str, slot: Any, shortcut: Any = None, name: str = "") -> QAction:
        action = QAction(text, self.window)
        if shortcut is not None:
            action.setShortcut(QKeySequence(shortcut))
            action.setShortcutContext(Qt.ShortcutContext.WindowShortcut)
        action.triggered.connect(slot)
        action.setObjectName(name)
        self.window.addAction(action)
        return action

    def build(self) -> None:
        win, act = self.win, self.action
        menu = self.window.menuBar()
        chat = menu.addMenu("&Chat")
        chat.addAction(act("New chat", win.new_tab, "Ctrl+T", "new-tab"))
        chat.addAction(act("Close tab", win.close_current_tab, "Ctrl+W", "close-tab"))
        chat.addAction(act("Next tab", win.next_tab, "Ctrl+Tab", "next-tab"))
        chat.addAction(act("Previous tab", win.previous_tab, "Ctrl+Shift+Tab", "previous-tab"))
        chat.addAction(act("Search conversations", win.sidebar.focus_search, "Ctrl+F", "search"))
        chat.addSeparator()
        transfers = win.sidebar.transfers
        chat.addAction(act("Import conversations…", transfers.import_dialog, None, "import"))
        chat.addAction(
            act(
                "Export all as Markdown…",
                lambda: transfers.export(None, ExportFormat.MARKDOWN),
                None,
                "export-all-markdown",
            )
        )
        chat.addAction(
            act(
                "Export all as JSON…",
                lambda: transfers.export(None, ExportFormat.JSON),
                None,
                "export-all-json",
            )
        )
        chat.addSeparator()
        chat.addAction(act("Quit", win.request_quit, QKeySequence.StandardKey.Quit, "quit"))
        models = menu.addMenu("&Models")
        models.addAction(act("Model manager…", win.show_model_manager, "Ctrl+M", "model-manager"))
        models.addAction(act("Discover…", win.show_discover, None, "discover"))
        models.addAction(act("Downloads…", win.show_downloads, None, "downloads"))
        models.addAction(act("Load a model file…", win.choose_model_file, None, "open"))
        models.addAction(act("Unload the model", win.unload_model, None, "unload"))
        settings = menu.addMenu("&Settings")
        settings.addAction(act("Context settings…", win.open_settings, "Ctrl+,", "settings"))
        settings.addAction(act("Preferences…", win.open_preferences, None, "preferences"))
        view = menu.addMenu("&View")
        toggle = act("Conversation list", win.toggle_sidebar, "Ctrl+B", "sidebar")
        toggle.setCheckable(True)
        toggle.setChecked(True)
        view.addAction(toggle)
        self.sidebar_action = toggle
        themes = view.addMenu("&Theme")
        themes.setObjectName("theme-menu")
        group = QActionGroup(self.window)
        group.setExclusive(True)
        for name in THEMES:
            action = QAction(f"{THEME_LABELS[name]}", self.window)
            action.setObjectName(f"theme-{name}")
            action.setCheckable(True)
            action.setChecked(name == win.app_settings.theme)
            action.setToolTip(
                "Follow the system's light or dark setting"
                if name == "system"
                else f"Always use the {name} theme"
            )
            action.triggered.connect(lambda _checked=False, n=name: win.set_theme(n))
            group.addAction(action)
            themes.addAction(action)
            self.theme_actions[name] = action

        help_menu = menu.addMenu("&Help")
        help_menu.setObjectName("help-menu")
        help_menu.addAction(act("Keyboard shortcuts", win.show_shortcuts, "Ctrl+/", "shortcuts"))
        help_menu.addAction(act("About LlamaDesk", win.show_about, None, "about"))

    def show_shortcuts(self) -> QDialog:
        from app.ui.help_dialogs import ShortcutsDialog, action_shortcuts, composer_shortcuts

        win = self.win
        rows = action_shortcuts(self.window.actions()) + list(composer_shortcuts(win.enter_sends()))
        return self._open_help(ShortcutsDialog(rows, self.window))

    def show_about(self) -> QDialog:
        from app.ui.help_dialogs import AboutDialog

        return self._open_help(AboutDialog(self.window))

    def _open_help(self, dialog: QDialog) -> QDialog:
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        self._help_dialog = dialog
        dialog.open()
        return dialog
