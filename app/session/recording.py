"""Turns the session records itself (``Session.answer``): the user's message and the reply
are written by the session thread's :class:`~app.session.recorder.Recorder` before the turn
starts, the reply saved while it streams, and finished with its
:class:`~app.session.recorder.ReplyMeta` when the turn ends, before the conversation's
subscribers hear of the end (so they read the stored reply).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from app.errors import LlamaDeskError
from app.messages import document
from app.session import commands as cmd
from app.session import events as ev
from app.session.outbox import Outbox
from app.session.recorder import ReplyMeta, SessionRecords, history
from app.session.registry import Registry
from app.session.replies import PartialReplies
from app.session.session_thread import on_session_thread
from app.session.states import NO_MODEL
from app.session.turns import NoModelError, Turns
from app.session.types import ConversationId, RecordedTurn, TurnId, TurnResult

log = logging.getLogger(__name__)

NO_DATABASE = "This session has no database: it records no messages."


@dataclass(frozen=True)
class _Pending:
    turn: TurnId
    reply_id: int
    model: str
    engine: str
    submitted_at: float


class Recording:
    """See the module docstring."""

    def __init__(
        self,
        registry: Registry,
        outbox: Outbox,
        turns: Turns,
        replies: PartialReplies,
        records: SessionRecords,
    ) -> None:
        self._registry = registry
        self._outbox = outbox
        self._turns = turns
        self._replies = replies
        self._records = records
        self._pending: dict[ConversationId, _Pending] = {}
        outbox.turn_ended.append(self.turn_ended)

    @on_session_thread
    def answer(self, command: cmd.Answer) -> None:
        reply = command.reply
        if not reply.set_running_or_notify_cancel():
            return
        cid, turn = command.conversation_id, command.turn_id
        engine = self._registry.live()
        recorder = self._records.recorder()
        if engine is None:
            self._refuse(command, NoModelError(NO_MODEL))
            return
        if recorder is None:
            self._refuse(command, LlamaDeskError(NO_DATABASE))
            return
        if self._registry.conv(cid).turn is not None:
            self._refuse(command, LlamaDeskError("This conversation is still answering."))
            return
        model = engine.describe()
        try:
            parent, user_id = command.parent_id, None
            if command.user_text is not None:
                user_id = parent = recorder.add_user(cid, command.user_text, parent).id
            tool_ids: list[int] = []
            for result in command.tool_results:
                if parent is None:
                    raise LlamaDeskError("Tool results answer a reply: give its id as the parent.")
                outcome = dict(command.tool_outcomes).get(result.tool_call_id, "")
                parent = recorder.add_tool_result(cid, result, parent, outcome).id
                tool_ids.append(parent)
            message = recorder.begin_reply(cid, parent, model.path)
            thread = recorder.db.get_thread(cid, message.id)
        except LlamaDeskError as exc:
            self._refuse(command, exc)
            return
        self._pending[cid] = _Pending(
            turn, message.id, model.path, model.engine, command.submitted_at
        )
        reply.set_result(RecordedTurn(turn, user_id, message.id, tuple(tool_ids)))
        if command.raw:
            prompt = document(thread[:-1])
            self._turns.submit_text(
                cmd.SubmitText(cid, turn, prompt, sampling=command.sampling, reply_id=message.id)
            )
            return
        self._turns.submit(
            cmd.SubmitTurn(
                cid,
                turn,
                history(thread[:-1]),
                command.system,
                command.sampling,
                command.reasoning,
                message.id,
                command.tools,
            )
        )

    @on_session_thread
    def delete_message(self, command: cmd.DeleteMessage) -> None:
        """Delete a stored message (not while the conversation answers: its reply is being
        written below it). The conversation's cache is then not trusted past the message:
        the next turn's prompt is made from the stored thread, and the engine keeps only
        the tokens it shares with the sequence (the prefix before the deleted message), so
        it re-reads from there; a regenerate does not repeat the last turn's messages."""
        reply, cid = command.reply, command.conversation_id
        if not reply.set_running_or_notify_cancel():
            return
        conv = self._registry.get(cid)
        recorder = self._records.recorder()
        try:
            if cid in self._pending or (conv is not None and conv.turn is not None):
                raise LlamaDeskError("This conversation is answering: stop it first.")
            if recorder is None:
                raise LlamaDeskError(NO_DATABASE)
            recorder.delete_message(cid, command.message_id)
        except LlamaDeskError as exc:
            reply.set_exception(exc)
            return
        if conv is not None:
            conv.last_turn = None
        reply.set_result(None)

    def _refuse(self, command: cmd.Answer, error: LlamaDeskError) -> None:
        """Nothing was recorded: the error is the reply's, and the turn ends failed."""
        command.reply.set_exception(error)
        self._outbox.fail_turn(command.conversation_id, command.turn_id, str(error), aborted=False)

    @on_session_thread
    def turn_ended(self, cid: ConversationId, turn: TurnId, result: TurnResult) -> None:
        """Finish the reply of a recorded turn (a failed one that wrote nothing is dropped)."""
        pending = self._pending.get(cid)
        if pending is None or pending.turn != turn:
            return
        del self._pending[cid]
        recorder = self._records.recorder()
        if recorder is None:
            return
        answer, reasoning, reasoning_ms = self._replies.streamed(cid)
        ttft_ms = None
        if result.first_token_at > 0:
            ttft_ms = (result.first_token_at - pending.submitted_at) * 1000.0
        meta = ReplyMeta.of(
            result,
            pending.model,
            pending.engine,
            ttft_ms=ttft_ms,
            reasoning=reasoning,
            reasoning_ms=reasoning_ms,
        )
        try:
            stored = recorder.end_reply(pending.reply_id, result.text or answer, meta)
        except LlamaDeskError as exc:
            log.warning("could not record reply %d: %s", pending.reply_id, exc)
            return
        index, count = 1, 1
        if stored is not None:
            try:
                index, count = recorder.db.sibling_position(stored.id)
            except LlamaDeskError as exc:  # deleted meanwhile by another client
                log.info("reply %d has no siblings to count: %s", stored.id, exc)
        self._outbox.emit(ev.ReplyStored(cid, turn, stored, meta, index, count))
