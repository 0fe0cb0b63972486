"""A chat tab's turns: generation and the session events of its conversation (streaming,
the finish with its figures, a failed turn and its "Try again", context-full notices).

The session saves the reply while it streams; the tab shows it (:class:`ReplyBuffer`
buffers it for the window's flush timer) and finishes it.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from app.engine import SamplingParams
from app.engine.reasoning import Channel
from app.errors import LlamaDeskError
from app.session import FinishReason, RestoreOutcome, TurnResult, reasoning_options
from app.session import events as ev
from app.ui.chat_messages import chat_messages, message_data
from app.ui.tab_reply import reply_end
from app.ui.tab_status import TabState

if TYPE_CHECKING:
    from app.ui.tab_protocols import TurnTab


class TabTurn:
    """The turns of ``tab`` (see the module docstring)."""

    def __init__(self, tab: TurnTab) -> None:
        self.tab = tab

    def generate(self, parent_id: int) -> None:
        tab = self.tab
        tab.save_settings()
        tab.notice.dismiss()  # a notice of an earlier turn (its "Try again") is old news
        try:
            reply = tab.db.begin_reply(tab.cid, parent_id, model_path=tab.host.model_path())
            tab.branch = tab.db.get_thread(tab.cid, reply.id)
        except LlamaDeskError as exc:
            tab.notify(str(exc))
            return
        history = chat_messages(tab.branch[:-1])
        tab.show_branch()
        last = tab.view.last()
        if last is not None:
            last.set_streaming(True)
        tab.view.set_actions_enabled(False)
        tab.reply_id = reply.id
        tab.reply.reset(submitted_at=time.perf_counter())
        tab.set_generating(True)
        tab.state = TabState.QUEUED
        tab.update_status()
        sampling = tab.conversation.sampling
        try:
            params = SamplingParams.from_dict(sampling)
        except (LlamaDeskError, TypeError, ValueError) as exc:
            self.on_failed(str(exc))
            self.on_finished(TurnResult(finish_reason=FinishReason.ERROR, error=str(exc)))
            return
        tab.host.session.submit(
            tab.cid,
            history,
            tab.conversation.system_prompt,
            params,
            reasoning_options(sampling),
            reply_id=reply.id,  # the session saves it as it streams
        )

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
            case ev.TurnFinished():
                self.on_finished(event.result)
            case ev.TurnFailed():
                self.on_failed(event.message)
            case ev.ContextShifted():
                self.on_shifted(event.n_discarded)
            case ev.SequenceStatus():
                tab.on_info(
                    {
                        "n_tokens": event.n_tokens,
                        "n_ctx": event.n_ctx,
                        "n_reserved": event.n_reserved,
                        "n_dropped": event.n_dropped,
                        "resident": event.resident,
                        "busy": event.busy,
                        "generating": event.generating,
                    }
                )
            case ev.CacheRestored():
                tab.on_info(
                    {
                        "restored": event.outcome is RestoreOutcome.RESTORED,
                        "parked": event.reason if event.outcome is RestoreOutcome.PARKED else None,
                        "restore_error": event.reason
                        if event.outcome is RestoreOutcome.REREAD
                        else None,
                    }
                )
            case ev.CacheParked():
                tab.on_info({"saved": event.saved, "resident": False})
            case ev.ConversationForked():
                tab.on_info({"forked": True})

    def on_started(self, n_to_process: int) -> None:
        tab = self.tab
        if tab.turns_since_open >= 1:  # what happened at restore is old news now
            tab.info.pop("restored", None)
            tab.info.pop("parked", None)
            tab.info.pop("restore_error", None)
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
            f"The context was full: the oldest {n_discarded} tokens of this conversation were "
            "dropped (the system prompt is kept).",
            False,
        )

    def on_finished(self, result: TurnResult) -> None:
        tab = self.tab
        tab.last_completion = result
        tab.turns_since_open += 1
        if tab.reply_id is None:
            return
        end = reply_end(result, tab.reply)
        if end.error or end.status == "error":
            # Said once, in this tab (also a full context that stopped the reply).
            self._report_error(end.error or "The reply failed.", failed=end.status == "error")
            if not end.text and not end.reasoning:
                # Nothing was written: an error is not an assistant message.
                self._drop_failed_reply()
                return
        self.finish_reply(end.text, end.status, **end.figures())

    def _report_error(self, message: str, failed: bool = True) -> None:
        """``failed``: the turn failed (else the reply stopped early, e.g. a full context
        with "Stop the reply": a notice, not an error)."""
        parent = self._reply_parent()
        retry = (
            ("Try again", lambda: self._retry(parent)) if parent is not None and failed else None
        )
        self.tab.notify(message, failed or not self.tab.reply.parts, retry)

    def _reply_parent(self) -> int | None:
        tab = self.tab
        if tab.reply_id is None:
            return None
        for message in tab.branch:
            if message.id == tab.reply_id:
                return message.parent_id
        return None

    def _retry(self, parent_id: int | None) -> None:
        if parent_id is not None and not self.tab.generating and self.tab.host.model_ready():
            self.generate(parent_id)

    def _drop_failed_reply(self) -> None:
        """Remove the empty reply of a failed turn (the user's message stays, ready for
        "Try again" or an edit)."""
        tab = self.tab
        reply_id, tab.reply_id = tab.reply_id, None
        tab.reply.parts = []
        tab.reply.reasoning_parts = []
        tab.reply.settled()
        tab.set_generating(False)
        tab.state = TabState.IDLE
        if reply_id is not None:
            try:
                tab.db.delete_branch(reply_id)
            except LlamaDeskError as exc:
                tab.notify(str(exc))
        tab.load_thread()
        tab.view.set_actions_enabled(True)
        tab.update_status()
        tab.reload_conversation()
        tab.host.conversation_changed(tab.cid)

    def finish_reply(self, text: str, status: str, **figures: Any) -> None:
        tab = self.tab
        reply_id, tab.reply_id = tab.reply_id, None
        tab.reply.parts = [text]
        if figures.get("reasoning"):
            tab.reply.reasoning_parts = [figures["reasoning"]]
        tab.reply.settled()
        tab.set_generating(False)
        tab.state = TabState.IDLE
        if reply_id is None:
            return
        try:
            message = tab.db.finish_reply(reply_id, text, status, **figures)
        except LlamaDeskError as exc:
            tab.notify(str(exc))
            return
        if tab.branch and tab.branch[-1].id == reply_id:
            tab.branch[-1] = message
        widget = tab.view.widget_for(reply_id)
        if widget is not None:
            widget.set_streaming(False)
            widget.update_data(message_data(tab.db, message))
        tab.view.set_actions_enabled(True)
        tab.update_status()
        tab.reload_conversation()
        tab.host.conversation_changed(tab.cid)

    def finish_for_shutdown(self) -> None:
        """Save the reply as it is (stopped) when the window closes mid-generation."""
        tab = self.tab
        if tab.reply_id is not None:
            reasoning = tab.reply.reasoning_text()
            self.finish_reply(
                tab.reply.text(),
                "stopped",
                meta={"finish_reason": "aborted"},
                reasoning=reasoning or None,
                reasoning_ms=tab.reply.thinking_ms() if reasoning else None,
            )
