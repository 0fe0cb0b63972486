"""A chat tab's turns: generation and the session events of its conversation (streaming,
the finish with its figures, a failed turn and its "Try again", context-full notices).

The tab only asks and shows: :meth:`TabTurn.generate` is one ``Session.answer`` (the
session records the user's message and the reply, saves it while it streams and finishes
it with its :class:`~app.session.ReplyMeta` before ``TurnFinished`` goes out); the tab
buffers the streamed text for the window's flush timer (:class:`ReplyBuffer`) and, at the
end, reads the stored reply back.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from concurrent.futures import Future
from typing import TYPE_CHECKING

from app.engine import SamplingParams
from app.engine.reasoning import Channel
from app.errors import LlamaDeskError
from app.messages import ChatMessage, document
from app.session import RecordedTurn, ReplyMeta, TurnResult, reasoning_options
from app.session import events as ev
from app.ui.chat_messages import shown_message
from app.ui.door import library, settle
from app.ui.tab_status import TabState
from app.ui.text_completion import document_data
from app.ui.wording import plural

if TYPE_CHECKING:
    from app.storage import Message
    from app.ui.tab_protocols import TurnTab


class TabTurn:
    """The turns of ``tab`` (see the module docstring)."""

    def __init__(self, tab: TurnTab) -> None:
        self.tab = tab
        self._answer: Future[RecordedTurn] | None = None  # the turn asked for last
        self._finished: TurnResult | None = None  # its end, if it came before its ids
        # The last reply the session stored (before its turn's end; matched by id there).
        self._stored: ev.ReplyStored | None = None
        self._parent: int | None = None  # the message the reply answers

    def generate(
        self,
        parent_id: int | None,
        text: str | None = None,
        tool_results: Sequence[ChatMessage] = (),
    ) -> bool:
        """Ask the session for a turn: ``text`` under ``parent_id`` (an edit: the edited
        message's parent), or, without text, another reply to ``parent_id`` (regenerate,
        "Try again"). The session records both messages; the reply's id comes back with
        the future (:meth:`on_recorded`). False: refused before anything was asked (the
        settings are not valid: the notice says why)."""
        tab = self.tab
        tab.save_settings()
        tab.notice.dismiss()  # a notice of an earlier turn (its "Try again") is old news
        sampling = tab.conversation.sampling
        try:
            params = SamplingParams.from_dict(sampling)
        except (LlamaDeskError, TypeError, ValueError) as exc:
            tab.notify(str(exc))
            return False
        tab.reply_id = None
        self._finished = None
        self._parent = None
        tab.reply.reset(submitted_at=time.perf_counter())
        raw = tab.document_mode  # text completion: the document is the prompt
        tab.view.set_actions_enabled(False)
        tab.set_generating(True)
        tab.state = TabState.QUEUED
        tab.update_status()
        future = tab.host.session.answer(
            tab.cid,
            parent_id,
            text,
            system=tab.conversation.system_prompt,
            sampling=params,
            reasoning=reasoning_options(sampling),
            # the chat's MCP tools, and the results of the calls ``parent_id`` made
            tools=None if raw else tab.tool_turns.request(continuing=bool(tool_results)),
            tool_results=tool_results,
            raw=raw,
        )
        self._answer = future
        tab.host.worker.when_done(
            future, lambda outcome: self.on_recorded(future, outcome, parent_id, text)
        )
        return True

    def on_recorded(
        self,
        future: Future[RecordedTurn],
        outcome: RecordedTurn | BaseException,
        parent_id: int | None,
        text: str | None,
    ) -> None:
        """The session recorded the turn's messages (on the GUI thread): show the branch
        with the reply it streams into. Refused (no model, no database): nothing was
        written, the user's text goes back into the composer (the turn's end, which
        follows, says why)."""
        tab = self.tab
        if future is not self._answer:
            return  # an older turn's (the tab was reset meanwhile)
        if isinstance(outcome, BaseException):
            if text and not tab.composer.toPlainText():
                tab.composer.setPlainText(text)
            return
        tab.reply_id = outcome.reply_message_id
        # what the reply answers: the new message, else the one answered again
        self._parent = outcome.user_message_id or parent_id
        door = library(tab.host.session)
        try:
            tab.branch = settle(door.thread(tab.cid, outcome.reply_message_id))
        except LlamaDeskError:
            # The turn failed at once and the session dropped its empty reply already
            # (its end is on the way): show the question it answers.
            try:
                tab.branch = settle(door.thread(tab.cid, self._parent)) if self._parent else []
            except LlamaDeskError as exc:
                tab.notify(str(exc))
        tab.show_branch()
        if tab.document_mode:  # the reply is painted after the document, in place
            tab.reply.prefix = document(tab.branch)
        last = tab.view.last()
        if last is not None and tab.generating:
            last.set_streaming(True)
        tab.reload_conversation()  # a first message titles the conversation
        tab.host.conversation_changed(tab.cid)
        finished, self._finished = self._finished, None
        if finished is not None:  # the turn ended before its ids were delivered
            self.on_finished(finished)

    # this conversation's session events (on the GUI thread)

    def on_event(self, event: object) -> None:
        tab = self.tab
        match event:
            case ev.TextStreamed():
                if event.channel is Channel.REASONING:
                    self.on_reasoning(event.text, event.n_tokens, event.sampled_at)
                else:
                    self.on_tokens(event.text, event.n_tokens, event.sampled_at)
            case ev.PromptProgressed():
                self.on_progress(event.done, event.total)
            case ev.TurnStarted():
                self.on_started(event.n_to_process)
            case ev.ReplyStored():
                self._stored = event  # the TurnFinished that follows shows it
            case ev.TurnFinished():
                self.on_finished(event.result)
            case ev.TurnFailed():
                self.on_failed(event.message)
            case ev.ContextShifted():
                self.on_shifted(event.n_discarded)
            case (
                ev.SequenceStatus()
                | ev.CacheRestored()
                | ev.CacheParked()
                | ev.ConversationForked()
            ):
                tab.on_status(event)  # the event itself: the figures read it (TabFigures)

    def on_started(self, n_to_process: int) -> None:
        tab = self.tab
        # what happened at restore is old news after one turn, or at once when this turn
        # re-reads most of what the restored cache held
        if tab.turns_since_open >= 1 or tab.info.restore_unused(n_to_process):
            tab.info = tab.info.turn_started()
        tab.state = TabState.PROMPT
        tab.prompt_progress = (0, n_to_process)
        tab.update_status()

    def on_progress(self, done: int, total: int) -> None:
        self.tab.state = TabState.PROMPT
        self.tab.prompt_progress = (done, total)
        self.tab.update_status()

    def on_reasoning(self, text: str, n_tokens: int, sampled_at: float) -> None:
        """Streamed reasoning (it comes before the answer)."""
        if self._streaming():
            self.tab.reply.add_reasoning(text, n_tokens, sampled_at)

    def on_tokens(self, text: str, n_tokens: int, sampled_at: float) -> None:
        if self._streaming():
            self.tab.reply.add_answer(text, n_tokens, sampled_at)

    def _streaming(self) -> bool:
        """Whether streamed text is this tab's reply's (the first of it starts the reply)."""
        tab = self.tab
        if not tab.generating:
            return False
        if tab.state is not TabState.GENERATING:
            tab.state = TabState.GENERATING
            tab.reply.start()
        return True

    def on_failed(self, message: str) -> None:
        # Said once, when the turn finishes (on_finished), in this tab's notice.
        self.tab.reply.error = message

    def on_shifted(self, n_discarded: int) -> None:
        self.tab.notify(
            f"The context was full: the oldest {plural(n_discarded, 'token')} of this "
            "conversation were "
            "dropped (the system prompt is kept).",
            False,
            model_bound=True,
        )

    def on_finished(self, result: TurnResult) -> None:
        """The turn ended: the session has stored the reply (or dropped an empty failed
        one) before this event went out, so the tab reads it back."""
        tab = self.tab
        tab.last_completion = result
        tab.turns_since_open += 1
        if not tab.generating:
            return
        if tab.reply_id is None:
            if self._answer is not None and not self._answer.done():
                self._finished = result  # its ids are on their way (on_recorded)
                return
            # refused before anything was recorded: say why, and nothing else changes
            self._answer = None
            # a refusal speaks of this model (its context size...): it goes with the model
            tab.notify(tab.reply.error or result.error or "The reply failed.", model_bound=True)
            self._settle()
            tab.view.set_actions_enabled(True)
            tab.update_status()
            return
        self._answer = None
        meta = ReplyMeta.of(result, "", "", error=tab.reply.error)
        reply_id, tab.reply_id = tab.reply_id, None
        notice = meta.notice
        if notice:
            # Said once, in this tab (also a full context that stopped the reply).
            self._report_error(notice, failed=meta.status == "error")
        stored = self._stored
        # None: an empty failed reply, which the session dropped
        message = stored.message if stored is not None else None
        if message is not None and message.id != reply_id:
            message = None
        self._settle(message)
        if message is None:
            tab.load_thread()
        else:
            if tab.branch and tab.branch[-1].id == reply_id:
                tab.branch[-1] = message
            widget = tab.view.widget_for(reply_id)
            if widget is not None:
                widget.set_streaming(False)
                assert stored is not None
                place = (stored.sibling_index, stored.sibling_count)
                shown = document_data(tab.branch, {reply_id: place}) if tab.document_mode else []
                widget.update_data(shown[0] if shown else shown_message(message, *place))
        tab.view.set_actions_enabled(True)
        tab.update_status()
        tab.reload_conversation()
        tab.host.conversation_changed(tab.cid)

    def _settle(self, message: Message | None = None) -> None:
        """The turn is over: the buffers hold the stored reply (nothing: none), the tab
        is idle."""
        tab = self.tab
        tab.reply.parts = [message.content] if message is not None else []
        tab.reply.reasoning_parts = [message.reasoning] if message and message.reasoning else []
        tab.reply.settled()
        tab.set_generating(False)
        tab.state = TabState.IDLE

    def _report_error(self, message: str, failed: bool = True) -> None:
        """``failed``: the turn failed (else the reply stopped early, e.g. a full context
        with "Stop the reply": a notice, not an error)."""
        parent = self._parent
        retry = (
            ("Try again", lambda: self._retry(parent)) if parent is not None and failed else None
        )
        self.tab.notify(message, failed or not self.tab.reply.parts, retry, model_bound=True)

    def _retry(self, parent_id: int | None) -> None:
        if parent_id is not None and not self.tab.generating and self.tab.host.model_ready():
            self.generate(parent_id)
