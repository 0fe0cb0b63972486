"""The main window's chat tabs: the tab bar and its menus, opening, closing, forking, saving.

The open tabs are this helper's (:attr:`WindowTabs.by_id`); the window asks it for them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtCore import QPoint, Qt
from PySide6.QtWidgets import (
    QHBoxLayout,
    QInputDialog,
    QMainWindow,
    QMenu,
    QTabWidget,
    QToolButton,
    QWidget,
)

from app.errors import LlamaDeskError
from app.storage import Tab
from app.storage.export import ExportFormat
from app.ui.chat_tab import ChatTab, chat_messages
from app.ui.door import library, settle
from app.ui.window_conversations import PURGE_AFTER_S
from app.ui.wording import FORK_SUFFIX

if TYPE_CHECKING:
    from app.ui.window_protocols import TabsWindow

TAB_TITLE_CHARS = 24


def tab_label(title: str, limit: int = TAB_TITLE_CHARS) -> str:
    """A tab's text: the title cut with an ellipsis, a fork's "(fork)" kept visible."""
    suffix = FORK_SUFFIX if title.endswith(FORK_SUFFIX) else ""
    base = title[: len(title) - len(suffix)] if suffix else title
    room = limit - len(suffix)
    if len(base) > room:
        base = base[: room - 1].rstrip() + "…"
    return base + suffix


class WindowTabs:
    """The tab widget of ``win`` and what opens, closes, names and saves its tabs
    (``window``: the window as the parent of the tab menu and the rename dialog)."""

    def __init__(self, win: TabsWindow, window: QMainWindow) -> None:
        self.win = win
        self.window = window
        self.by_id: dict[int, ChatTab] = {}  # the open tabs by conversation id

    def build(self) -> QTabWidget:
        win = self.win
        self.tab_widget = QTabWidget()
        self.tab_widget.setObjectName("tabs")
        self.tab_widget.setTabsClosable(True)
        self.tab_widget.setMovable(True)
        self.tab_widget.setDocumentMode(True)
        self.tab_widget.tabCloseRequested.connect(self.close_tab)
        self.tab_widget.currentChanged.connect(self.on_current_changed)
        self.tab_widget.tabBar().tabMoved.connect(lambda *_: win.schedule_save_tabs())
        self.tab_widget.setUsesScrollButtons(True)
        self.tab_widget.setElideMode(Qt.TextElideMode.ElideNone)  # tab_label() cuts titles
        tab_bar = self.tab_widget.tabBar()
        tab_bar.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        tab_bar.customContextMenuRequested.connect(self.tab_context_menu)
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
        self.tab_list_menu.aboutToShow.connect(self.fill_tab_list)
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
        self.show_sidebar_button.clicked.connect(win.toggle_sidebar)
        self.tab_widget.setCornerWidget(self.show_sidebar_button, Qt.Corner.TopLeftCorner)
        self.show_sidebar_button.setVisible(False)
        return self.tab_widget

    def tabs(self) -> list[ChatTab]:
        out = []
        for i in range(self.tab_widget.count()):
            w = self.tab_widget.widget(i)
            if isinstance(w, ChatTab):
                out.append(w)
        return out

    def current_tab(self) -> ChatTab | None:
        w = self.tab_widget.currentWidget()
        return w if isinstance(w, ChatTab) else None

    def fork_from(self, tab: ChatTab, message_id: int) -> None:
        win = self.win
        try:
            door = library(win.session)
            conversation = settle(door.fork(tab.cid, message_id))
            thread = settle(door.thread(conversation.id))
        except LlamaDeskError as exc:
            win.show_message(str(exc))
            return
        new = self.add_tab(conversation.id, None, open_in_session=False)
        if new is None:
            return
        win.session.fork(
            tab.cid,
            conversation.id,
            chat_messages(thread),
            tab.conversation.system_prompt,
            new.tab_policy(),
        )
        self.tab_widget.setCurrentWidget(new)
        new.composer.setFocus(Qt.FocusReason.OtherFocusReason)
        win.sidebar.schedule_refresh()
        win.schedule_save_tabs()

    def fork_tab(self, conversation_id: int, message_id: int) -> None:
        """What a tab asks for by its conversation's id (see :meth:`fork_from`)."""
        tab = self.by_id.get(conversation_id)
        if tab is not None:
            self.fork_from(tab, message_id)

    def add_tab(
        self, conversation_id: int, leaf_id: int | None, open_in_session: bool = True
    ) -> ChatTab | None:
        win = self.win
        if win.server.api_busy(conversation_id):
            win.show_message(
                "An API client is being answered in this conversation: open it when that "
                "request has finished (the Server panel's log shows it).",
                error=False,
            )
            return None
        try:
            conversation = settle(library(win.session).conversation(conversation_id))
        except LlamaDeskError as exc:
            win.show_message(str(exc))
            return None
        tab = ChatTab(win, conversation, leaf_id)
        tab.composer.set_enter_sends(win.app_settings.send_with_enter)
        tab.set_font_size(win.app_settings.font_size)
        tab.set_compact(win.narrow_layout())
        tab.titleChanged.connect(lambda t=tab: self.update_tab_title(t))
        self.by_id[conversation_id] = tab
        win.server.set_open_conversations(self.by_id)
        self.tab_widget.addTab(tab, "")
        self.update_tab_title(tab)
        if open_in_session:  # bound to a sequence now, or when a model is loaded
            win.session.open(conversation_id, tab.tab_policy())
        self.sync_send(tab)
        win.update_stack()
        return tab

    def sync_send(self, tab: ChatTab | None = None) -> None:
        """Send is enabled only while a model is loaded."""
        ready = self.win.model_ready()
        for t in [tab] if tab is not None else self.tabs():
            t.send_button.setEnabled(ready)
            t.send_button.setToolTip(
                ("Send (Enter)" if self.win.enter_sends() else "Send (Ctrl+Enter)")
                if ready
                else "Load a model first (the picker in the toolbar)."
            )

    def update_tab_title(self, tab: ChatTab) -> None:
        index = self.tab_widget.indexOf(tab)
        if index < 0:
            return
        title = tab.title
        short = tab_label(title)
        self.tab_widget.setTabText(index, ("● " if tab.generating else "") + short)
        self.tab_widget.setTabToolTip(index, title)

    def new_tab(self) -> ChatTab | None:
        win = self.win
        if win.read_only:
            win.show_message(
                "The conversation database is open read-only: new chats cannot be saved."
            )
            return None
        s = win.app_settings
        try:
            conversation = settle(
                library(win.session).create(
                    system_prompt=s.default_system_prompt,
                    sampling=s.default_sampling.to_dict(),
                    model_path=win.model_path(),
                )
            )
        except LlamaDeskError as exc:
            win.show_message(str(exc))
            return None
        tab = self.add_tab(conversation.id, None)
        if tab is not None:
            self.tab_widget.setCurrentWidget(tab)
            tab.composer.setFocus()
        win.sidebar.schedule_refresh()
        win.schedule_save_tabs()
        return tab

    def start_chat_with(self, text: str) -> ChatTab | None:
        """A new chat whose first message is ``text`` (the welcome page's suggestions)."""
        tab = self.new_tab()
        if tab is not None:
            tab.composer.setPlainText(text)
            tab.send()
        return tab

    def open_conversation(self, conversation_id: int) -> None:
        tab = self.by_id.get(conversation_id)
        if tab is None:
            tab = self.add_tab(conversation_id, None)
            self.win.schedule_save_tabs()
        if tab is not None:
            self.tab_widget.setCurrentWidget(tab)
            tab.composer.setFocus(Qt.FocusReason.OtherFocusReason)

    def close_tab(self, index: int) -> None:
        win = self.win
        tab = self.tab_widget.widget(index)
        if not isinstance(tab, ChatTab):
            return
        tab.save_settings()
        self.remove_tab(tab)
        empty = not tab.branch
        if empty and not win.read_only:
            # An empty "New chat" that was never used does not clutter the list.
            try:
                door = library(win.session)
                settle(door.delete_if_unused(tab.cid))
                settle(door.purge_deleted(older_than_seconds=PURGE_AFTER_S))
            except LlamaDeskError:
                pass
            win.sidebar.schedule_refresh()
        win.update_stack()
        win.schedule_save_tabs()

    def remove_tab(self, tab: ChatTab) -> None:
        """Take ``tab`` out (its reply so far and its cache saved by the session); the
        conversation stays."""
        win = self.win
        index = self.tab_widget.indexOf(tab)
        # A reply still streaming ends stopped: the session records it as it closes.
        win.session.close(tab.cid, save=True)
        win.worker.release(tab.cid)
        self.by_id.pop(tab.cid, None)
        win.server.set_open_conversations(self.by_id)
        self.tab_widget.removeTab(index)
        tab.deleteLater()

    def step_tab(self, step: int) -> None:
        """The next (+1) or previous (-1) tab, round the ends."""
        n = self.tab_widget.count()
        if n:
            self.tab_widget.setCurrentIndex((self.tab_widget.currentIndex() + step) % n)

    def on_current_changed(self, _index: int) -> None:
        tab = self.current_tab()
        if tab is not None:
            tab.flush(True)
            tab.view.scroll_to_end() if tab.view.follow else None
            # Typing goes to the chat that became current (Ctrl+Tab, the sidebar, a fork).
            tab.composer.setFocus(Qt.FocusReason.OtherFocusReason)
        self.sidebar_set_current(tab)
        self.win.schedule_save_tabs()

    def sidebar_set_current(self, tab: ChatTab | None) -> None:
        setter = getattr(self.win.sidebar, "set_current", None)
        if setter is not None:
            setter(tab.cid if tab is not None else None)

    def save_tabs(self) -> None:
        win = self.win
        if win.read_only:
            return
        tabs = [Tab(t.cid, i, t.leaf_id()) for i, t in enumerate(self.tabs())]
        current = self.current_tab()
        try:
            settle(library(win.session).save_tabs(tabs, current.cid if current else None))
        except LlamaDeskError as exc:
            win.show_message(str(exc))

    def fill_tab_list(self) -> None:
        self.tab_list_menu.clear()
        current = self.current_tab()
        for tab in self.tabs():
            action = self.tab_list_menu.addAction(("● " if tab.generating else "") + tab.title)
            action.setCheckable(True)
            action.setChecked(tab is current)
            action.triggered.connect(lambda _c=False, t=tab: self.tab_widget.setCurrentWidget(t))

    def tab_context_menu(self, pos: QPoint) -> None:
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
        menu = QMenu(self.window)
        menu.setObjectName("tab-menu")
        rename = menu.addAction("Rename…")
        rename.triggered.connect(lambda: self.ask_rename(tab))
        last = tab.leaf_id()
        fork = menu.addAction("Fork from the last message")
        fork.setEnabled(last is not None and not tab.generating)
        if last is not None:
            fork.triggered.connect(lambda: self.fork_from(tab, last))
        menu.addSeparator()
        self.add_export_actions(menu, [tab.cid])
        menu.addSeparator()
        close = menu.addAction("Close tab")
        close.triggered.connect(lambda: self.close_tab(self.tab_widget.indexOf(tab)))
        others = menu.addAction("Close other tabs")
        others.setEnabled(self.tab_widget.count() > 1)
        others.triggered.connect(lambda: self.close_other_tabs(tab))
        return menu

    def ask_rename(self, tab: ChatTab) -> QInputDialog:
        dialog = QInputDialog(self.window)
        dialog.setObjectName("rename-dialog")
        dialog.setWindowTitle("Rename chat")
        dialog.setLabelText("Title")
        dialog.setTextValue(tab.title)
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        cid = tab.cid

        def chosen(title: str) -> None:
            if title.strip():
                self.win.rename_conversation(cid, title.strip())

        dialog.textValueSelected.connect(chosen)
        dialog.open()
        return dialog

    def close_other_tabs(self, keep: ChatTab) -> None:
        for tab in [t for t in self.tabs() if t is not keep]:
            self.close_tab(self.tab_widget.indexOf(tab))

    def add_export_actions(self, menu: QMenu, conversation_ids: list[int]) -> None:
        """Export entries for these conversations."""
        transfers, ids = self.win.sidebar.transfers, list(conversation_ids)
        menu.addAction("Export as Markdown…", lambda: transfers.export(ids, ExportFormat.MARKDOWN))
        menu.addAction("Export as JSON…", lambda: transfers.export(ids, ExportFormat.JSON))
