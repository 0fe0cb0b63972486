"""What the server needs from the :class:`~app.session.Session` beyond its public API.

:class:`ServerSession` is a ``Session`` with two more commands, handled on the session
thread between engine steps:

- :class:`EngineCall`: run a function on the engine (tokenize, detokenize, render a chat
  template, embeddings) and hand back its result through a ``Future``;
- :class:`SubmitPrompt`: a turn from raw prompt tokens (``/v1/completions``), where
  ``SubmitTurn`` only takes chat messages.

Both belong in ``app/session`` (see the server's notes); until they are there, this
subclass reaches into the session's private turn bookkeeping the same way ``_submit`` does.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, TypeVar

from app.engine import Engine, SamplingParams
from app.errors import LlamaDeskError
from app.session import ConversationId, Session, TurnId
from app.session import commands as cmd
from app.session import events as ev
from app.session.session import _NO_MODEL, _Stream

T = TypeVar("T")


class NoModelError(LlamaDeskError):
    """No model is loaded (yet)."""


@dataclass(frozen=True)
class EngineCall:
    fn: Callable[[Engine], Any]
    reply: Future[Any]


@dataclass(frozen=True)
class SubmitPrompt:
    conversation_id: ConversationId
    turn_id: TurnId
    tokens: tuple[int, ...]
    sampling: SamplingParams = field(default_factory=SamplingParams)


class ServerSession(Session):
    """A :class:`Session` that also runs engine calls and raw-prompt turns."""

    def call(self, fn: Callable[[Engine], T]) -> Future[T]:
        """Run ``fn(engine)`` on the session thread (between steps); its result or error
        comes back in the future (:class:`NoModelError` without a model)."""
        future: Future[T] = Future()
        self._queue.put(EngineCall(fn, future))  # type: ignore[arg-type]
        return future

    def submit_prompt(
        self, conversation_id: int, tokens: tuple[int, ...], sampling: SamplingParams
    ) -> TurnId:
        cid = ConversationId(conversation_id)
        turn = self._new_turn(cid)
        self._queue.put(SubmitPrompt(cid, turn, tokens, sampling))  # type: ignore[arg-type]
        return turn

    def _handle(self, command: cmd.Command | EngineCall | SubmitPrompt) -> None:
        if isinstance(command, EngineCall):
            self._call(command)
        elif isinstance(command, SubmitPrompt):
            self._submit_prompt(command)
        else:
            super()._handle(command)

    def _call(self, command: EngineCall) -> None:
        if not command.reply.set_running_or_notify_cancel():
            return
        engine = self._engine
        if engine is None or engine.context is None:
            command.reply.set_exception(NoModelError(_NO_MODEL))
            return
        try:
            command.reply.set_result(command.fn(engine))
        except BaseException as exc:
            command.reply.set_exception(exc)

    def _submit_prompt(self, command: SubmitPrompt) -> None:
        cid, turn = command.conversation_id, command.turn_id
        conv = self._conv(cid)
        engine = self._engine
        if engine is None or engine.context is None:
            self._fail_turn(cid, turn, _NO_MODEL, aborted=False)
            return
        if conv.turn is not None:
            self._fail_turn(cid, turn, "This conversation is still answering.", aborted=False)
            return
        self._bind(conv)
        assert conv.key is not None
        if self._cancelled(cid, turn):
            self._fail_turn(cid, turn, "", aborted=True)
            return
        try:
            command.sampling.validate()
            n = engine.set_tokens(conv.key, list(command.tokens))
            engine.start(conv.key, command.sampling)
        except LlamaDeskError as exc:
            self._fail_turn(cid, turn, str(exc), aborted=False)
            return
        conv.turn = turn
        conv.stream = _Stream()
        self._replies.begin(cid, None)
        self._emit(ev.TurnStarted(cid, turn, n))
        self._dirty.add(cid)
        if self._cancelled(cid, turn):
            engine.stop(conv.key)
