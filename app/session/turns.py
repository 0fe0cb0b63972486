"""Starting turns: chat, text and token prompts, regenerate, and calls into the engine.

A turn is refused with a sentence (``TurnFailed`` then ``TurnFinished`` with ERROR) when no
model is loaded, the conversation is still answering, the engine cannot take the prompt,
or the sampling settings are wrong; a turn stopped before it started ends ABORTED. Its
events then come from :mod:`app.session.streams`.
"""

from __future__ import annotations

from dataclasses import replace

from app.engine import SamplingParams
from app.errors import LlamaDeskError
from app.session import commands as cmd
from app.session import events as ev
from app.session.conversations import Conversations
from app.session.engine_port import (
    Capability,
    ChatPrompt,
    Prompt,
    TextPrompt,
    TokenPrompt,
    capability_missing,
)
from app.session.outbox import Outbox
from app.session.registry import Registry, Stream
from app.session.replies import PartialReplies
from app.session.session_thread import on_session_thread
from app.session.states import NO_MODEL
from app.session.types import ConversationId, TurnId


class NoModelError(LlamaDeskError):
    """A ``Session.call`` while no model is loaded."""


class Turns:
    """See the module docstring."""

    def __init__(
        self,
        registry: Registry,
        outbox: Outbox,
        conversations: Conversations,
        replies: PartialReplies,
    ) -> None:
        self._registry = registry
        self._outbox = outbox
        self._conversations = conversations
        self._replies = replies

    @on_session_thread
    def submit(self, command: cmd.SubmitTurn) -> None:
        prompt = ChatPrompt(command.messages, command.system, command.reasoning, command.tools)
        self.start(
            command.conversation_id,
            command.turn_id,
            prompt,
            command.sampling,
            command.reply_id,
            command,
        )

    @on_session_thread
    def submit_text(self, command: cmd.SubmitText) -> None:
        prompt = TextPrompt(command.text, command.append)
        self.start(
            command.conversation_id,
            command.turn_id,
            prompt,
            command.sampling,
            command.reply_id,
            None,
        )

    @on_session_thread
    def submit_tokens(self, command: cmd.SubmitTokens) -> None:
        prompt = TokenPrompt(command.tokens)
        self.start(
            command.conversation_id,
            command.turn_id,
            prompt,
            command.sampling,
            command.reply_id,
            None,
        )

    @on_session_thread
    def regenerate(self, command: cmd.Regenerate) -> None:
        conv = self._registry.conv(command.conversation_id)
        last = conv.last_turn
        if last is None:
            self._outbox.fail_turn(
                conv.cid, command.turn_id, "There is no turn to regenerate yet.", aborted=False
            )
            return
        self.submit(
            replace(
                last,
                turn_id=command.turn_id,
                sampling=command.sampling if command.sampling is not None else last.sampling,
                reply_id=command.reply_id,
            )
        )

    @on_session_thread
    def start(
        self,
        cid: ConversationId,
        turn: TurnId,
        prompt: Prompt,
        params: SamplingParams,
        reply_id: int | None,
        last_turn: cmd.SubmitTurn | None,
    ) -> None:
        """Queue a turn's prompt and start generating; ``last_turn``: what a regenerate
        repeats (None: this turn is not one)."""
        conv = self._registry.conv(cid)
        engine = self._registry.live()
        fail = self._outbox.fail_turn
        if engine is None:
            fail(cid, turn, NO_MODEL, aborted=False)
            return
        if conv.turn is not None:
            fail(cid, turn, "This conversation is still answering.", aborted=False)
            return
        if not isinstance(prompt, ChatPrompt) and Capability.TOKENS not in engine.capabilities:
            fail(cid, turn, capability_missing(Capability.TOKENS), aborted=False)
            return
        self._conversations.bind(conv)
        assert conv.key is not None
        if self._registry.cancelled(cid, turn):
            fail(cid, turn, "", aborted=True)
            return
        try:
            params.validate()
            n = engine.start(conv.key, prompt, params)
        except LlamaDeskError as exc:
            fail(cid, turn, str(exc), aborted=False)
            return
        conv.turn = turn
        conv.last_turn = last_turn
        conv.stream = Stream()
        self._replies.begin(cid, reply_id)
        self._outbox.emit(ev.TurnStarted(cid, turn, n))
        self._registry.dirty.add(cid)
        if self._registry.cancelled(cid, turn):  # a stop that raced with the start
            engine.stop(conv.key)

    @on_session_thread
    def engine_call(self, command: cmd.EngineCall) -> None:
        if not command.reply.set_running_or_notify_cancel():
            return
        engine = self._registry.live()
        if engine is None:
            command.reply.set_exception(NoModelError(NO_MODEL))
            return
        if Capability.LOCAL_CALLS not in engine.capabilities:
            command.reply.set_exception(LlamaDeskError(capability_missing(Capability.LOCAL_CALLS)))
            return
        try:
            command.reply.set_result(engine.call(command.fn))
        except BaseException as exc:  # the caller's function: its error is its result
            command.reply.set_exception(exc)
