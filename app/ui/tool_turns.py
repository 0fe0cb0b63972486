"""A chat's tool rounds: the tools a turn offers, the calls the model makes shown as
blocks under its reply, each call asked about and run (the window's
:class:`~app.ui.tool_runner.ToolRunner`), and the model answering the results.

A round: the reply ends with calls (``FinishReason.TOOL_CALLS``; the session has stored
them with the reply) -> the tab stays busy (Stop shows) -> the calls run one after the
other, each asked first (:class:`~app.ui.approval_dialog.ApprovalAsker`) -> the results go
back with ``Session.answer(tool_results=...)``, which records them under the reply and
generates the next one from the stored thread. The loop guard of the turn (at most N
rounds, no call repeated) gives the model a sentence instead of another round and the
continuation offers no tools, so a turn always ends.

Stop (or closing the tab) during a round denies the call waiting for approval, cancels
the running one and ends the turn there: nothing is sent to the model. A reopened chat
shows its stored calls: the ``tool`` messages are drawn into the blocks of the reply that
called (their own widgets are hidden).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

from shiboken6 import isValid

from app.engine.tool_calls.request import ToolChoiceMode, ToolRequest
from app.engine.tool_calls.specs import ToolSpecError
from app.engine.tool_calls.usable import usable_tools
from app.mcp.approval import denied_result
from app.mcp.host import ModelCall, RoundResult
from app.mcp.loop_guard import LoopGuard
from app.messages import TOOL_CALL_ID_KEY, ChatMessage, MessageToolCall, stored_tool_calls
from app.session import FinishReason, TurnResult
from app.session import events as ev
from app.ui.approval_dialog import ApprovalAsker, ApprovalDialog
from app.ui.tool_call_block import CallState, CallView, state_of
from app.ui.tool_runner import RoundHandle

if TYPE_CHECKING:
    from app.storage import Message
    from app.ui.message_widget import MessageWidget

__all__ = ["TabToolTurns", "stored_state"]

log = logging.getLogger(__name__)

_DENIED_START: Final = denied_result("", "").text.split("'")[
    0
]  # "Error: The user did not allow the tool "
_STOPPED_WORDS: Final = (" was stopped", "Stopped: ")


def stored_state(content: str) -> CallState:
    """How a stored call ended, read from the result the model was given (the texts of
    :mod:`app.mcp`: an error result starts with "Error:")."""
    if content.startswith(_DENIED_START):
        return CallState.DENIED
    if content.startswith("Error:"):
        if any(word in content for word in _STOPPED_WORDS):
            return CallState.STOPPED
        return CallState.FAILED
    return CallState.DONE


class TabToolTurns:
    """The tool rounds of ``tab`` (a :class:`~app.ui.chat_tab.ChatTab`)."""

    def __init__(self, tab: Any) -> None:
        self.tab = tab
        self.guard = LoopGuard()
        self.round: RoundHandle | None = None
        self.stopped = False  # Stop during a round: the turn ends there
        self._guard_stop: str | None = None  # the loop guard stopped: no tools next
        self._calls: list[ModelCall] = []  # the round's calls, in order
        self._servers: dict[str, str] = {}  # call id -> its server
        self._current = 0  # the call the round is at (for "waiting" / "running")
        self._reply_id = 0  # the reply whose calls the round runs
        self._streamed: dict[int, list[str]] = {}  # index -> [call id, name, arguments]
        self._left_out: set[str] = set()  # tools already said to be left out (said once)
        self.asker = ApprovalAsker(tab, self._on_dialog)
        # How the user's turns may call (auto: the model chooses); a continuation after
        # results is always auto, so a forced call cannot repeat for ever.
        self.choice = ToolChoiceMode.AUTO

    # -- what a turn offers ---------------------------------------------------------------

    def request(self, continuing: bool) -> ToolRequest | None:
        """The tools of the next turn (None: none on, or the loop guard stopped the turn).
        ``continuing``: it answers tool results (else a new turn: the guard starts over)."""
        if not continuing:
            self.guard = LoopGuard()
            self._guard_stop = None
        if self._guard_stop is not None:
            return None
        tools = self.tab.tools
        runner = tools.runner
        if runner is None or not tools.enabled:
            return None
        if not runner.up_to_date():
            tools.connect()  # for the next turn; this one goes without (a sentence says so)
            self.tab.notify(
                "The MCP servers are being connected: this message goes without tools.", False
            )
            return None
        specs, left_out = usable_tools(runner.openai_tools(tools.enabled))
        for warning in left_out:  # one bad tool must not take the others with it
            if warning not in self._left_out:
                self._left_out.add(warning)
                self.tab.notify(warning, False)
        if not specs:
            return None
        try:
            choice = ToolChoiceMode.AUTO if continuing else self.choice
            return ToolRequest.from_openai(specs, choice.value)
        except ToolSpecError as exc:
            self.tab.notify(f"The chat's tools cannot be offered to the model: {exc}")
            return None

    # -- the session's events -------------------------------------------------------------

    def on_event(self, event: object) -> None:
        """After the tab's turn handled ``event`` (a conversation event)."""
        if isinstance(event, ev.ToolCallStreamed):
            self._on_streamed(event)
        elif isinstance(event, ev.TurnFinished):
            self._streamed.clear()
            self.on_finished(event.result)

    def _on_streamed(self, event: ev.ToolCallStreamed) -> None:
        entry = self._streamed.setdefault(event.index, [event.call_id, event.name, ""])
        if event.name:
            entry[0], entry[1] = event.call_id, event.name
        entry[2] += event.fragment
        widget = self._reply_widget()
        if widget is not None and entry[1]:
            call_id = entry[0] or f"streamed-{event.index}"
            widget.tool_calls().set_call(
                CallView(call_id, entry[1], entry[2], "", CallState.CALLED)
            )

    def _reply_widget(self) -> MessageWidget | None:
        tab = self.tab
        if tab.reply_id is not None:
            widget: MessageWidget | None = tab.view.widget_for(tab.reply_id)
            return widget
        return None

    def on_finished(self, result: TurnResult) -> None:
        """The turn ended and its reply is stored: a round when it ended in calls."""
        tab = self.tab
        for error in result.tool_errors:
            tab.notify(error)
        if result.finish_reason is not FinishReason.TOOL_CALLS or not result.tool_calls:
            return
        reply = tab.branch[-1] if tab.branch and tab.branch[-1].role == "assistant" else None
        runner = tab.tools.runner
        if reply is None or runner is None or not stored_tool_calls(reply.meta or {}):
            return  # (the reply is not stored with its calls: nothing to answer)
        self._run_round(reply, result.tool_calls)

    # -- a round --------------------------------------------------------------------------

    def _run_round(self, reply: Message, calls: Sequence[MessageToolCall]) -> None:
        tab = self.tab
        self.stopped = False
        self._calls = []
        self._servers = {}
        self._current = 0
        self._reply_id = reply.id
        widget = tab.view.widget_for(reply.id)
        runner = tab.tools.runner
        for call in calls:
            arguments = call.parsed_arguments()
            tool = runner.tool_for(call.name, tab.tools.enabled)
            server = tool.server if tool is not None else ""
            self._servers[call.call_id] = server
            # arguments that are not an object go as they are: the host answers with an error
            args = arguments if isinstance(arguments, dict) else {"arguments": call.arguments}
            self._calls.append(ModelCall(call.call_id, call.name, args))
            if widget is not None:
                widget.tool_calls().set_call(
                    CallView(call.call_id, call.name, call.arguments, server, CallState.CALLED)
                )
        self._mark(0, CallState.RUNNING)
        tab.set_generating(True)  # Stop shows; the composer waits
        reply_id = reply.id
        handle = runner.run_round(
            self._calls,
            tab.tools.enabled,
            self.asker.ask,
            self.guard,
            lambda result: self._round_done(reply_id, result),
        )
        self.round = handle
        tab.destroyed.connect(handle.cancel)  # a closed tab stops its round

    def _mark(self, index: int, state: CallState) -> None:
        """The round's call ``index`` is waiting or running now (a finished one stays)."""
        widget = self.tab.view.widget_for(self._reply_id)
        if widget is None or not 0 <= index < len(self._calls):
            return
        call = self._calls[index]
        block = widget.tool_calls().block(call.call_id)
        if block is not None and block.state in (
            CallState.CALLED,
            CallState.RUNNING,
            CallState.WAITING,
        ):
            view = block.view
            block.set_view(CallView(view.call_id, view.name, view.arguments, view.server, state))

    def _on_dialog(self, dialog: ApprovalDialog) -> None:
        """A call asks: its block says so until the answer."""
        index = next(
            (
                i
                for i in range(self._current, len(self._calls))
                if self._calls[i].name.endswith(dialog.request.tool)
            ),
            self._current,
        )
        self._current = index
        self._mark(index, CallState.WAITING)
        dialog.decided.connect(lambda decision: self._on_decided(index))

    def _on_decided(self, index: int) -> None:
        if isValid(self.tab):
            self._mark(index, CallState.RUNNING)
            self._current = index + 1

    def _round_done(self, reply_id: int, result: RoundResult) -> None:
        if not isValid(self.tab):
            return
        tab = self.tab
        self.round = None
        widget = tab.view.widget_for(reply_id)
        by_id = {m.call_id: m for m in result.messages}
        for call in self._calls:
            message = by_id.get(call.call_id)
            if message is None or widget is None:
                continue
            state = state_of(message.result.outcome)
            if self.stopped and state is CallState.DENIED:
                state = CallState.STOPPED  # denied by the Stop, not by the user
            view = widget.tool_calls().block(call.call_id)
            arguments = view.view.arguments if view is not None else ""
            widget.tool_calls().set_call(
                CallView(
                    call.call_id,
                    call.name,
                    arguments,
                    message.server or self._servers.get(call.call_id, ""),
                    state,
                    message.content,
                    message.result.sentence,
                )
            )
        if self.stopped:
            tab.set_generating(False)
            tab.notify("The tool calls were stopped: the model was not given their results.", False)
            return
        if result.stopped:
            self._guard_stop = result.stopped
        results = [
            ChatMessage("tool", m.content, tool_call_id=m.call_id, name=m.name)
            for m in result.messages
        ]
        if not results:  # nothing ran (the servers went away): the turn ends with a sentence
            tab.set_generating(False)
            tab.notify(result.stopped or "The tool calls could not be run.")
            return
        tab.set_generating(False)  # generate() starts the next turn (busy again at once)
        if not tab.turn.generate(reply_id, tool_results=results):
            tab.notify("The model could not be given the tools' results.")

    def stop(self) -> bool:
        """Stop a round under way (True if there was one)."""
        handle = self.round
        if handle is None:
            return False
        self.stopped = True
        handle.cancel()
        self.asker.deny_all()
        return True

    # -- a stored chat --------------------------------------------------------------------

    def render(self) -> None:
        """Draw the stored calls of the shown branch into their replies' blocks; hide the
        ``tool`` messages' own widgets (their text is in the blocks)."""
        tab = self.tab
        results: dict[str, Message] = {}
        for message in tab.branch:
            if message.role == "tool":
                call_id = (message.meta or {}).get(TOOL_CALL_ID_KEY)
                if isinstance(call_id, str):
                    results[call_id] = message
                widget = tab.view.widget_for(message.id)
                if widget is not None:
                    widget.setVisible(False)
        for message in tab.branch:
            if message.role != "assistant":
                continue
            calls = stored_tool_calls(message.meta or {})
            widget = tab.view.widget_for(message.id)
            if not calls or widget is None:
                continue
            blocks = widget.tool_calls()
            for call in calls:
                stored = results.get(call.call_id)
                shown = blocks.block(call.call_id)
                if stored is None and shown is not None:
                    continue  # a round under way owns it
                state = stored_state(stored.content) if stored is not None else CallState.CALLED
                server = shown.view.server if shown is not None else ""
                blocks.set_call(
                    CallView(
                        call.call_id,
                        call.name,
                        call.arguments,
                        server,
                        state,
                        stored.content if stored is not None else "",
                    )
                )
