"""A chat's tools: the "Tools" button in the tab's status line, the list it opens (the
connected MCP servers and their tools, each with a check box and its cost in tokens), and
a warning under the status line when the definitions take more than ~15% of the context.

The choice is the conversation's (:class:`~app.ui.tool_selection.ToolSelection`). The
servers are connected on first use (the window's :class:`~app.ui.tool_runner.ToolRunner`,
off the GUI thread), again after Preferences changed them. Costs are counted with the
loaded model's tokenizer (an estimate without a model, and said so).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from PySide6.QtCore import QPoint, Qt, Slot
from PySide6.QtWidgets import (
    QComboBox,
    QFrame,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPushButton,
    QToolButton,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)
from shiboken6 import isValid

from app.engine.tool_calls.request import ToolChoiceMode
from app.mcp.client import McpTool
from app.ui.tool_runner import Connected, ToolRunner
from app.ui.tool_selection import ToolSelection, selection_path
from app.ui.tool_tokens import ToolCost, count_tools, share_warning

__all__ = ["ChatTools", "ToolPicker", "shared_selection"]

Pair = tuple[str, str]
PAIR_ROLE = Qt.ItemDataRole.UserRole

_selection: ToolSelection | None = None


def shared_selection() -> ToolSelection:
    """The one record of the chats' choices (read once, again if the data folder moved)."""
    global _selection
    if _selection is None or _selection.path != selection_path():
        _selection = ToolSelection()
    return _selection


class ToolsTab(Protocol):
    """What the tools of a chat need of its tab."""

    cid: int
    host: Any  # the window (TabHost): its worker, model_ready() and tool_runner
    info: Any  # TabFigures: n_ctx

    def notify(self, text: str, error: bool = True) -> None: ...


# How the chat's next messages may call (the CLI's --tool-choice): the combo's items
CHOICES = (
    (ToolChoiceMode.AUTO, "The model may call a tool"),
    (ToolChoiceMode.REQUIRED, "The model must call a tool"),
    (ToolChoiceMode.NONE, "No calls (tools described only)"),
)
CHOICE_TIP = (
    "How your next messages may call the tools on (like --tool-choice on the command "
    "line). A reply to tool results may always answer in words, so a forced call does not "
    "repeat for ever."
)


def place_on_screen(popup: QWidget, anchor: QWidget) -> None:
    """Put ``popup`` under ``anchor`` (its right edges lined up), or above it where the
    screen ends below; never past the screen's edges."""
    below = anchor.mapToGlobal(QPoint(anchor.width(), anchor.height()))
    above = anchor.mapToGlobal(QPoint(anchor.width(), 0))
    screen = anchor.screen().availableGeometry()
    width = min(popup.width(), screen.width())
    height = min(popup.height(), screen.height())
    popup.resize(width, height)
    x = min(max(below.x() - width, screen.left()), screen.right() + 1 - width)
    y = below.y()
    if y + height > screen.bottom() + 1:
        y = (
            above.y() - height
            if above.y() - height >= screen.top()
            else screen.bottom() + 1 - height
        )
    popup.move(x, max(y, screen.top()))


class ToolPicker(QFrame):
    """The list of servers and tools, with check boxes (a popup under the button)."""

    def __init__(self, tools: ChatTools, parent: QWidget | None = None) -> None:
        super().__init__(parent, Qt.WindowType.Popup)
        self.setObjectName("tool-picker")
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self._tools = tools
        layout = QVBoxLayout(self)
        self.tree = QTreeWidget()
        self.tree.setObjectName("tool-picker-tree")
        self.tree.setHeaderLabels(["Tool", "Tokens"])
        self.tree.setAccessibleName("Tools of this chat")
        self.tree.itemChanged.connect(self._on_changed)
        layout.addWidget(self.tree, 1)
        row = QHBoxLayout()
        row.addWidget(QLabel("Calls:"))
        self.choice = QComboBox()
        self.choice.setObjectName("tool-choice")
        self.choice.setToolTip(CHOICE_TIP)
        for mode, text in CHOICES:
            self.choice.addItem(text, mode)
        self.choice.activated.connect(self._on_choice)
        row.addWidget(self.choice, 1)
        layout.addLayout(row)
        self.summary = QLabel()
        self.summary.setObjectName("tool-picker-summary")
        self.summary.setWordWrap(True)
        layout.addWidget(self.summary)
        self.reconnect = QPushButton("Connect again")
        self.reconnect.setObjectName("tool-picker-reconnect")
        self.reconnect.setToolTip("Restart or reach the servers again (after a crash or a change)")
        self.reconnect.clicked.connect(lambda: tools.connect(force=True))
        layout.addWidget(self.reconnect, 0, Qt.AlignmentFlag.AlignLeft)
        self.resize(420, 320)

    def fill(self) -> None:
        tools = self._tools
        self.tree.blockSignals(True)
        self.tree.clear()
        connected = tools.runner.connected if tools.runner is not None else None
        if connected is None:
            self.tree.addTopLevelItem(QTreeWidgetItem(["Connecting to the MCP servers…", ""]))
        else:
            if not connected.statuses:
                self.tree.addTopLevelItem(
                    QTreeWidgetItem(["No MCP servers are on: add them in Preferences ▸ Tools.", ""])
                )
            for status in connected.statuses:
                top = QTreeWidgetItem([status.name, ""])
                if not status.connected:
                    top.setText(1, "failed")
                    top.setToolTip(0, status.sentence)
                    self.tree.addTopLevelItem(top)
                    failed = QTreeWidgetItem([status.sentence, ""])
                    failed.setFlags(Qt.ItemFlag.ItemIsEnabled)
                    top.addChild(failed)
                    top.setExpanded(True)
                    continue
                top.setFlags(
                    top.flags() | Qt.ItemFlag.ItemIsUserCheckable | Qt.ItemFlag.ItemIsAutoTristate
                )
                self.tree.addTopLevelItem(top)
                for tool in status.tools:
                    pair = (tool.server, tool.name)
                    child = QTreeWidgetItem([tool.name, tools.cost_text(pair)])
                    child.setData(0, PAIR_ROLE, pair)
                    child.setToolTip(0, tool.description)
                    child.setFlags(child.flags() | Qt.ItemFlag.ItemIsUserCheckable)
                    child.setCheckState(
                        0,
                        Qt.CheckState.Checked if pair in tools.enabled else Qt.CheckState.Unchecked,
                    )
                    top.addChild(child)
                top.setExpanded(True)
        # the names whole (not "ge…"): the name column takes what the cost column leaves
        self.tree.resizeColumnToContents(0)
        header = self.tree.header()
        header.setStretchLastSection(False)
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        header.setSectionResizeMode(1, QHeaderView.ResizeMode.ResizeToContents)
        self.choice.setCurrentIndex(max(0, self.choice.findData(self._tools.choice())))
        self.tree.blockSignals(False)
        self.summary.setText(tools.summary())

    def items(self) -> list[QTreeWidgetItem]:
        """The tools' items (with their pair)."""
        out = []
        for i in range(self.tree.topLevelItemCount()):
            top = self.tree.topLevelItem(i)
            for j in range(top.childCount() if top is not None else 0):
                child = top.child(j) if top is not None else None
                if child is not None and child.data(0, PAIR_ROLE) is not None:
                    out.append(child)
        return out

    @Slot(int)
    def _on_choice(self, index: int) -> None:
        self._tools.set_choice(ToolChoiceMode(self.choice.itemData(index)))

    @Slot(QTreeWidgetItem, int)
    def _on_changed(self, item: QTreeWidgetItem, column: int) -> None:
        if column != 0:
            return
        pairs = {
            tuple(child.data(0, PAIR_ROLE))
            for child in self.items()
            if child.checkState(0) == Qt.CheckState.Checked
        }
        self._tools.choose({(str(p[0]), str(p[1])) for p in pairs})


class ChatTools:
    """One tab's tools: ``button`` (status line), ``warning`` (a label under it)."""

    def __init__(self, tab: ToolsTab) -> None:
        self.tab = tab
        self.selection = shared_selection()
        self.enabled: set[Pair] = self.selection.enabled(tab.cid)
        runner = getattr(tab.host, "tool_runner", None)
        self.runner: ToolRunner | None = runner if isinstance(runner, ToolRunner) else None
        self.costs: dict[Pair, int] = {}
        self.estimated = True
        self._counted_with: str | None = None  # the model the costs were counted with
        self.button = QToolButton()
        self.button.setObjectName("tools-button")
        self.button.setToolTip("The MCP tools this chat may use (each call asks first)")
        self.button.clicked.connect(self.open_picker)
        self.warning = QLabel()
        self.warning.setObjectName("tools-warning")
        self.warning.setWordWrap(True)
        self.warning.setContentsMargins(8, 0, 8, 2)
        self.warning.setVisible(False)
        self.picker: ToolPicker | None = None
        self._connecting = False
        self._on_connected: list[Callable[[], None]] = []
        self._update_button()
        if self.enabled:  # a chat with tools: its servers are ready by its first message
            self.connect()

    # -- connecting and counting ----------------------------------------------------------

    def connect(self, force: bool = False, then: Callable[[], None] | None = None) -> None:
        """Connect the window's servers unless they are already (``then`` once they are)."""
        runner = self.runner
        if runner is None:
            return
        if then is not None:
            self._on_connected.append(then)
        if not force and runner.up_to_date():
            self._connected(runner.connected)
            return
        if self._connecting:
            return
        self._connecting = True
        runner.connected = None
        self._refresh_picker()
        runner.connect(self._connected)

    def _connected(self, connected: Connected | None) -> None:
        if not isValid(self.button):
            return
        self._connecting = False
        if connected is not None:
            for problem in connected.problems:
                self.tab.notify(problem)
            self._count(connected.tools())
        self._refresh_picker()
        waiting, self._on_connected = self._on_connected, []
        for then in waiting:
            then()

    def _count(self, tools: list[McpTool]) -> None:
        model = self.tab.host.model_path() if self.tab.host.model_ready() else None
        if model != self._counted_with:  # another tokenizer and template: count again
            self.costs.clear()
            self._counted_with = model
        missing = [t for t in tools if (t.server, t.name) not in self.costs]
        if not missing:
            self._update_button()
            return

        def counted(cost: ToolCost) -> None:
            if not isValid(self.button):
                return
            self.estimated = cost.estimated
            for tool, n in zip(missing, cost.tokens, strict=True):
                self.costs[(tool.server, tool.name)] = n
            self._update_button()
            self._refresh_picker()

        count_tools(missing, self.tab.host.worker, self.tab.host.model_ready(), counted)

    # -- the choice -----------------------------------------------------------------------

    def available(self) -> list[McpTool]:
        """The tools switched on for this chat that a connected server has."""
        if self.runner is None:
            return []
        return self.runner.tools(self.enabled)

    def choose(self, pairs: set[Pair]) -> None:
        self.enabled = pairs
        problem = self.selection.set_enabled(self.tab.cid, pairs)
        if problem:
            self.tab.notify(problem)
        self._update_button()
        if self.picker is not None and isValid(self.picker):
            self.picker.summary.setText(self.summary())

    def choice(self) -> ToolChoiceMode:
        """How the chat's next message may call (the tab's turns keep it)."""
        turns = getattr(self.tab, "tool_turns", None)
        mode = getattr(turns, "choice", ToolChoiceMode.AUTO)
        return mode if isinstance(mode, ToolChoiceMode) else ToolChoiceMode.AUTO

    def set_choice(self, mode: ToolChoiceMode) -> None:
        turns = getattr(self.tab, "tool_turns", None)
        if turns is not None:
            turns.choice = mode
        self._update_button()

    def cost(self) -> ToolCost:
        pairs = [(t.server, t.name) for t in self.available()]
        return ToolCost(tuple(self.costs.get(p, 0) for p in pairs), self.estimated)

    def cost_text(self, pair: Pair) -> str:
        n = self.costs.get(pair)
        if n is None:
            return "…"
        return f"~{n:,}" if self.estimated else f"{n:,}"

    def summary(self) -> str:
        tools = self.available()
        if not tools:
            return "No tools are on for this chat."
        cost = self.cost()
        n_ctx = self.tab.info.n_ctx
        share = f", {cost.total / n_ctx:.0%} of the {n_ctx:,}-token context" if n_ctx else ""
        how = " (estimated: no model is loaded)" if cost.estimated else ""
        return f"{len(tools)} tools on: their definitions take {cost.text(cost.total)}{share}{how}."

    def _update_button(self) -> None:
        n = len(self.enabled)
        forced = n and self.choice() is ToolChoiceMode.REQUIRED
        self.button.setText(f"Tools: {n}{' (must call)' if forced else ''}" if n else "Tools")
        warning = share_warning(self.cost(), self.tab.info.n_ctx) if self.available() else ""
        self.warning.setText(warning)
        self.warning.setVisible(bool(warning))
        self.warning.setStyleSheet("color: #c60;" if warning else "")

    def context_changed(self) -> None:
        """The tab's context size may have changed (its status came)."""
        self._update_button()

    # -- the popup ------------------------------------------------------------------------

    @Slot()
    def open_picker(self) -> ToolPicker:
        if self.picker is None or not isValid(self.picker):
            self.picker = ToolPicker(self, self.button)
        picker = self.picker
        picker.fill()
        place_on_screen(picker, self.button)
        picker.show()
        self.connect()
        return picker

    def _refresh_picker(self) -> None:
        if self.picker is not None and isValid(self.picker) and self.picker.isVisible():
            self.picker.fill()


def attach(tab: ToolsTab, status_row: Any, layout: Any) -> ChatTools:
    """The tab's hook: the button at the end of ``status_row``, the warning in ``layout``."""
    tools = ChatTools(tab)
    status_row.addWidget(tools.button)
    layout.addWidget(tools.warning)
    return tools
