"""Deleting one message of a chat (its header's Delete): asked first, then done by the
session (its recorder writes; the UI never writes messages), and the tab shows the thread
again.

What happens to the messages below it: they stay, joined to the message above it (as LM
Studio and Jan delete just that message). The messages are a tree (an edit or a
regenerate is a sibling), so a deleted message's replies move up to its parent; the
question says so. The conversation's cache is not trusted past the deleted message: the
next turn re-reads from there (see ``Session.remove_message``). Not while the tab answers:
the reply is being written below it.
"""

from __future__ import annotations

from concurrent.futures import Future
from typing import TYPE_CHECKING, Protocol

from PySide6.QtWidgets import QMessageBox, QWidget

from app.errors import LlamaDeskError
from app.ui.door import library, settle

if TYPE_CHECKING:
    from app.storage import Message
    from app.ui.message_bar import MessageBar
    from app.ui.tab_host import TabHost

ANSWERING = "This tab is answering: stop it first (Esc), then delete the message."
WITH_REPLIES = "Delete this message? The messages below it stay: they follow the message above it."
ALONE = "Delete this message?"
HANGING = "Your last message has no reply now."
ANSWER = "Answer it"


class DeletingTab(Protocol):
    """What deleting a message uses of the chat tab."""

    host: TabHost
    cid: int

    @property
    def generating(self) -> bool: ...

    def notify(self, text: str, error: bool = True) -> None: ...

    def load_thread(self, leaf_id: int | None = None) -> None: ...

    def leaf_id(self) -> int | None: ...

    def forget_edit(self, message_id: int) -> None: ...

    def after_delete(self) -> None:
        """The thread shown again after a delete (its meter and what to offer)."""
        ...


def ask_delete(tab: DeletingTab, parent: QWidget, message_id: int) -> QMessageBox | None:
    """Ask whether to delete the message (a window-modal question, opened, not exec'd);
    returns the question (None: refused at once, said in the tab)."""
    if tab.generating:
        tab.notify(ANSWERING, error=False)
        return None
    try:
        has_replies = bool(settle(library(tab.host.session).children(message_id)))
    except LlamaDeskError as exc:
        tab.notify(str(exc))
        return None
    box = QMessageBox(parent)
    box.setObjectName("delete-message")
    box.setIcon(QMessageBox.Icon.Question)
    box.setWindowTitle("Delete message")
    box.setText(WITH_REPLIES if has_replies else ALONE)
    box.setInformativeText("This cannot be undone.")
    delete = box.addButton("Delete", QMessageBox.ButtonRole.DestructiveRole)
    delete.setObjectName("delete-message-confirm")
    cancel = box.addButton(QMessageBox.StandardButton.Cancel)
    box.setDefaultButton(cancel)  # Enter does not delete by mistake

    def answered() -> None:
        if box.clickedButton() is delete:
            delete_now(tab, message_id)
        box.deleteLater()

    box.finished.connect(answered)
    box.open()
    return box


class AfterDeleteTab(Protocol):
    """What :func:`offer_after_delete` uses of the chat tab."""

    branch: list[Message]
    notice: MessageBar
    count_stale: bool

    @property
    def generating(self) -> bool: ...

    def update_status(self) -> None: ...

    def regenerate_under(self, message_id: int) -> None: ...


def offer_after_delete(tab: AfterDeleteTab) -> None:
    """The thread is shown again after a delete: the meter says its size, about (the
    session counts again at the next turn); a user message left without its reply is
    offered an answer (a notice that stays until used or dismissed)."""
    tab.count_stale = True
    tab.update_status()
    last = tab.branch[-1] if tab.branch else None
    if last is not None and last.role == "user" and not tab.generating:
        answer = (ANSWER, lambda: tab.regenerate_under(last.id))
        tab.notice.show_message(HANGING, False, answer, timeout_ms=0)


def delete_now(tab: DeletingTab, message_id: int) -> None:
    """Ask the session to delete it; the tab shows its thread again when it is done."""
    if tab.generating:
        tab.notify(ANSWERING, error=False)
        return
    shown_leaf = tab.leaf_id()
    future: Future[None] = tab.host.session.remove_message(tab.cid, message_id)

    def done(outcome: object) -> None:  # on the GUI thread
        if isinstance(outcome, BaseException):
            tab.notify(str(outcome))
            return
        tab.forget_edit(message_id)  # an edit of the deleted message has nothing to replace
        # the leaf it showed, unless that was the deleted message (then the one storage chose)
        tab.load_thread(None if shown_leaf == message_id else shown_leaf)
        tab.after_delete()
        tab.host.conversation_changed(tab.cid)

    tab.host.worker.when_done(future, done)
