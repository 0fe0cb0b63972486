"""What a chat tab notes of its session events before its turn handles them: a tool call
being written is not a quiet stream, and a finished turn ends the notes that only held
until then (the server failed the reply, the restore, a count made stale by a delete)."""

from __future__ import annotations

from typing import Protocol

from app.session import events as ev
from app.ui.tab_reply import ReplyBuffer
from app.ui.tab_status import TabFigures


class NotingTab(Protocol):
    reply: ReplyBuffer
    info: TabFigures
    server_failed: bool  # the remote engine failed the last reply
    count_stale: bool  # a message was deleted: the count comes with the next turn


def note_event(tab: NotingTab, event: object) -> None:
    if isinstance(event, ev.ToolCallStreamed):
        tab.reply.heard()  # a call being written is not a quiet stream
    elif isinstance(event, ev.TurnFinished):
        # a remote server that failed the reply: "idle · on box" would say all is well
        tab.server_failed = bool(tab.info.engine) and bool(event.result.error)
        # "cache restored from disk" is old news once a turn has used it (a re-read
        # cache's note stays for this turn: it says why the turn was slow)
        tab.info = tab.info.restore_used()
        tab.count_stale = False
