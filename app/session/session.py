"""The session: the engine on its own thread, and the conversations bound to its sequences.

A :class:`Session` owns one engine (a :class:`~app.session.engine_port.ConversationEngine`;
llama.cpp in this process by default) on the session thread
(:mod:`app.session.session_thread`). Its public methods, callable from any thread, queue
commands (:mod:`app.session.commands`); the thread handles them and, while any sequence is
busy, steps the engine between them. It knows conversations (by
:data:`~app.session.types.ConversationId`), never widgets: each conversation's events go to
that conversation's subscribers, the session's own (model loaded, memory figures) to the
session's subscribers. Callbacks run on the session thread: a GUI marshals them.

Stopping does not go through the queue (a queued command would wait for the whole
generation): :meth:`Session.stop` calls the engine's thread-safe ``stop`` and marks the
conversation's pending turn as cancelled in case it has not started yet.

The work is done by one room per concern, each run on the session thread:
:mod:`~app.session.registry` (conversations, their sequences, turn tickets),
:mod:`~app.session.conversations` (open, close, fork, residency),
:mod:`~app.session.turns` (starting turns), :mod:`~app.session.streams` (running turns:
engine events to conversation events), :mod:`~app.session.states` (state files),
:mod:`~app.session.models` (loading) and :mod:`~app.session.recorder` (the messages a turn
writes to storage). This module is the front door and the command dispatch.

Without a store or a database nothing is persisted: the command line runs such a session.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import Future
from contextlib import contextmanager
from typing import TYPE_CHECKING, TypeVar

from app.engine import ContextSettings, SamplingParams
from app.engine.chat_template import ReasoningOptions
from app.engine.settings import ModelSettings
from app.engine.tool_calls.request import ToolRequest
from app.errors import LlamaDeskError
from app.session import commands as cmd
from app.session import events as ev
from app.session.conversations import Conversations
from app.session.engine_port import EngineLoader
from app.session.library import Library
from app.session.local_engine import LocalLoader
from app.session.models import SHUTDOWN_STEP_S, Models
from app.session.outbox import ConversationCallback, Outbox, SessionCallback
from app.session.recorder import SessionRecords
from app.session.recording import Recording
from app.session.registry import Registry
from app.session.replies import PartialReplies
from app.session.session_thread import SessionThread, on_session_thread
from app.session.states import States
from app.session.streams import STATS_INTERVAL_S, Streams
from app.session.turns import NoModelError, Turns
from app.session.types import (
    ChatMessage,
    ContextFullPolicy,
    ConversationId,
    ConversationSnapshot,
    RecordedTurn,
    TurnId,
)

if TYPE_CHECKING:
    from app.engine import Engine
    from app.storage import Database, StateStore

log = logging.getLogger(__name__)

STREAM_INTERVAL_S = 0.012  # streamed text is handed out at most this often per conversation

T = TypeVar("T")

__all__ = [
    "SHUTDOWN_STEP_S",
    "STATS_INTERVAL_S",
    "STREAM_INTERVAL_S",
    "ConversationCallback",
    "NoModelError",
    "Session",
    "SessionCallback",
]


class Session:
    """See the module docstring. Every public method is thread-safe and returns at once."""

    def __init__(
        self,
        store: StateStore | None = None,
        database: Database | None = None,
        *,
        stream_interval_s: float = STREAM_INTERVAL_S,
        name: str = "session",
        loader: EngineLoader | None = None,
        library_database: Database | None = None,
    ) -> None:
        """``store``: state files (None: caches are not persisted). ``database``: where
        the session records messages (:meth:`answer`) and saves replies while they
        stream (a connection is cloned on the session thread; None: nothing is
        recorded). ``loader``: how models are loaded (default: llama.cpp in this process;
        a remote engine's loader plugs in here). ``library_database``: where
        :attr:`library` reads and changes conversations (default ``database``; a window
        with a read-only database reads there and records nothing)."""
        source = library_database if library_database is not None else database
        # The conversations' rows (the window's door to them): None without a database.
        self.library: Library | None = Library(source) if source is not None else None
        self._registry = registry = Registry()
        self._outbox = outbox = Outbox(registry)
        records = SessionRecords(database)
        self._replies = replies = PartialReplies(records)
        states = States(registry, outbox, store)
        self._streams = streams = Streams(registry, outbox, states, replies, stream_interval_s)
        self._conversations = conversations = Conversations(
            registry, outbox, states, streams, replies
        )
        self._turns = turns = Turns(registry, outbox, conversations, replies)
        self._recording = Recording(registry, outbox, turns, replies, records)
        self._states = states
        self._models = Models(
            registry,
            outbox,
            states,
            streams,
            conversations,
            replies,
            loader if loader is not None else LocalLoader(),
        )
        loop = _Loop(
            registry, streams, outbox, self._models, replies, records, self.library, self._handle
        )
        self._thread: SessionThread[cmd.Command] = SessionThread(loop, name)
        self._thread.start()

    # ================================================================ subscriptions

    def subscribe(self, conversation_id: int, callback: ConversationCallback) -> Callable[[], None]:
        """Deliver this conversation's events to ``callback`` (on the session thread);
        returns the function that unsubscribes."""
        return self._outbox.subscribe(ConversationId(conversation_id), callback)

    def subscribe_session(self, callback: SessionCallback) -> Callable[[], None]:
        """Deliver the session's own events to ``callback`` (on the session thread)."""
        return self._outbox.subscribe_session(callback)

    # ================================================================ commands (any thread)

    def post(self, command: cmd.Command) -> None:
        """Queue a command for the session thread."""
        self._thread.post(command)

    def load_model(
        self,
        path: str,
        settings: ContextSettings,
        default_policy: ContextFullPolicy = ContextFullPolicy.SHIFT,
        *,
        fallback: bool = True,
        model_settings: ModelSettings | None = None,
    ) -> None:
        """Load a model (``ModelLoaded`` or ``ModelLoadFailed`` follows). Context settings
        the model refuses fall back to the defaults (a warning says so); without
        ``fallback`` the load fails instead. ``model_settings``: its chat template."""
        self._models.load_cancel.clear()
        self.post(cmd.LoadModel(str(path), settings, default_policy, fallback, model_settings))

    def cancel_load(self) -> None:
        """Give up a model load in progress (its progress callback returns False)."""
        self._models.load_cancel.set()

    def unload_model(self) -> None:
        self.post(cmd.UnloadModel())

    def open(self, conversation_id: int, policy: ContextFullPolicy | None = None) -> None:
        """Open the conversation: bound to a sequence now (or as soon as a model is loaded)."""
        self.post(cmd.OpenConversation(ConversationId(conversation_id), policy))

    def close(self, conversation_id: int, save: bool = True) -> None:
        """Close the conversation's sequence (a generation is stopped; its cache saved)."""
        self.stop(conversation_id)
        self.post(cmd.CloseConversation(ConversationId(conversation_id), save))

    def submit(
        self,
        conversation_id: int,
        messages: Iterable[ChatMessage],
        system: str = "",
        sampling: SamplingParams | None = None,
        reasoning: ReasoningOptions | None = None,
        reply_id: int | None = None,
        *,
        tools: ToolRequest | None = None,
    ) -> TurnId:
        """Generate the reply to ``messages`` (an edit or a regenerate is a submit of the
        history it answers); returns the turn's id. ``tools``: the functions the reply may
        call (``ToolCallStreamed`` events, ``TurnResult.tool_calls``); the next turn sends
        the assistant message with its ``tool_calls`` and a ``tool`` message per result."""
        cid = ConversationId(conversation_id)
        turn = self._registry.new_turn(cid)
        self.post(
            cmd.SubmitTurn(
                cid,
                turn,
                tuple(messages),
                system,
                sampling if sampling is not None else SamplingParams(),
                reasoning if reasoning is not None else ReasoningOptions(),
                reply_id,
                tools,
            )
        )
        return turn

    def answer(
        self,
        conversation_id: int,
        parent_id: int | None,
        user_text: str | None = None,
        *,
        system: str = "",
        sampling: SamplingParams | None = None,
        reasoning: ReasoningOptions | None = None,
        tools: ToolRequest | None = None,
        tool_results: Iterable[ChatMessage] = (),
        tool_outcomes: Mapping[str, str] | None = None,
        raw: bool = False,
    ) -> Future[RecordedTurn]:
        """A chat turn the session records (it needs a database): the user's message
        ``user_text`` under ``parent_id`` (an edit: the edited message's parent; None
        text: answer ``parent_id`` again, a regenerate or a retry), then the reply,
        generated from the stored thread, saved as it streams and finished with its
        metadata before ``TurnFinished`` goes out. The future holds the ids (before the
        turn starts) or the error; the turn's events follow as for :meth:`submit`.

        ``tools``: the functions the reply may call (its calls are stored with it). To
        continue after calls, answer the reply that made them (``parent_id``) with
        ``tool_results``: one ``ChatMessage("tool", text, tool_call_id=..., name=...)``
        per call, recorded under it, then the next reply. ``tool_outcomes``: how each
        call went (by call id: "ok", "denied"...), stored with its result.

        ``raw``: text completion, for a base model: the stored thread joined is the whole
        prompt (no template, no system prompt, no tools) and the reply continues it;
        ``user_text`` None then continues ``parent_id`` (the document's last part)."""
        cid = ConversationId(conversation_id)
        future: Future[RecordedTurn] = Future()
        self.post(
            cmd.Answer(
                cid,
                self._registry.new_turn(cid),
                parent_id,
                user_text,
                system,
                sampling if sampling is not None else SamplingParams(),
                reasoning if reasoning is not None else ReasoningOptions(),
                time.perf_counter(),
                future,
                tools,
                tuple(tool_results),
                tuple((tool_outcomes or {}).items()),
                raw,
            )
        )
        return future

    def submit_tokens(
        self,
        conversation_id: int,
        tokens: tuple[int, ...],
        sampling: SamplingParams | None = None,
        *,
        reply_id: int | None = None,
    ) -> TurnId:
        """Generate after a prompt of token ids (checked against the vocabulary)."""
        cid = ConversationId(conversation_id)
        turn = self._registry.new_turn(cid)
        params = sampling if sampling is not None else SamplingParams()
        self.post(cmd.SubmitTokens(cid, turn, tuple(tokens), params, reply_id))
        return turn

    def call(self, fn: Callable[[Engine], T]) -> Future[T]:
        """Run ``fn(engine)`` on the session thread between steps; the future holds its
        result or error (:class:`NoModelError` while no model is loaded). For short work:
        every conversation waits meanwhile."""
        future: Future[T] = Future()
        self.post(cmd.EngineCall(fn, future))
        return future

    def submit_text(
        self,
        conversation_id: int,
        text: str,
        sampling: SamplingParams | None = None,
        *,
        append: bool = False,
        reply_id: int | None = None,
    ) -> TurnId:
        """Generate after plain text: the whole prompt (tokenized as-is), or with ``append``
        text that follows what the conversation's cache holds (e.g. after
        :meth:`restore_state_file`; empty text: go on from the cache). Returns the turn's
        id; such a turn is not one :meth:`regenerate` repeats."""
        cid = ConversationId(conversation_id)
        turn = self._registry.new_turn(cid)
        self.post(
            cmd.SubmitText(
                cid,
                turn,
                text,
                append,
                sampling if sampling is not None else SamplingParams(),
                reply_id,
            )
        )
        return turn

    def regenerate(
        self,
        conversation_id: int,
        sampling: SamplingParams | None = None,
        reply_id: int | None = None,
    ) -> TurnId:
        """Run the last turn again: its prompt is cached, nothing is decoded again."""
        cid = ConversationId(conversation_id)
        turn = self._registry.new_turn(cid)
        self.post(cmd.Regenerate(cid, turn, sampling, reply_id))
        return turn

    def stop(self, conversation_id: int | None = None) -> None:
        """Stop one conversation's generation (or all); effective within one micro-batch."""
        self._registry.stop(None if conversation_id is None else ConversationId(conversation_id))

    def fork(
        self,
        source: int,
        target: int,
        messages: Iterable[ChatMessage],
        system: str = "",
        policy: ContextFullPolicy | None = None,
    ) -> None:
        """Open ``target`` with ``source``'s cache up to the end of ``messages``."""
        self.post(
            cmd.ForkConversation(
                ConversationId(source), ConversationId(target), tuple(messages), system, policy
            )
        )

    def set_policy(self, conversation_id: int, policy: ContextFullPolicy | None) -> None:
        self.post(cmd.SetPolicy(ConversationId(conversation_id), policy))

    def set_default_policy(self, policy: ContextFullPolicy) -> None:
        self.post(cmd.SetDefaultPolicy(policy))

    def reconfigure(self, settings: ContextSettings) -> None:
        self.post(cmd.Reconfigure(settings))

    def save_all(self) -> None:
        self.post(cmd.SaveAll())

    def save_state_file(self, conversation_id: int, path: str) -> Future[int]:
        """Write the open conversation's cache to ``path`` (after its turn ends); the
        future holds the file's size, or the error (a :class:`LlamaDeskError`)."""
        future: Future[int] = Future()
        self.post(cmd.SaveStateFile(ConversationId(conversation_id), str(path), future))
        return future

    def restore_state_file(self, conversation_id: int, path: str) -> Future[ev.CacheRestored]:
        """Load the state file at ``path`` into the conversation, opening it if need be.
        The future holds the ``CacheRestored`` its subscribers get (``REREAD`` with the
        reason when the file is refused: the cache is then empty), or the error."""
        future: Future[ev.CacheRestored] = Future()
        self.post(cmd.RestoreStateFile(ConversationId(conversation_id), str(path), future))
        return future

    @contextmanager
    def batch(self) -> Iterator[None]:
        """Turns submitted inside the block start together: the engine takes no step until
        it ends (commands are still handled, so waiting on a future inside is safe)."""
        with self._thread.hold():
            yield

    def inspect(self, conversation_id: int) -> Future[ConversationSnapshot]:
        """What the session holds for the conversation (answered on the session thread)."""
        future: Future[ConversationSnapshot] = Future()
        self.post(cmd.Inspect(ConversationId(conversation_id), future))
        return future

    def remove_message(self, conversation_id: int, message_id: int) -> Future[None]:
        """Delete one stored message of the conversation; its replies move up to its
        parent. Refused (the future's exception) while the conversation answers. The next
        turn re-reads the conversation from where the message was (see
        :meth:`~app.session.recording.Recording.delete_message`)."""
        future: Future[None] = Future()
        self.post(cmd.DeleteMessage(ConversationId(conversation_id), message_id, future))
        return future

    def tell_stored(self, conversation_id: int, created: bool = False) -> None:
        """A client that stores conversations itself (the API server's store) created the
        row (``created``) or stored a turn: the session's subscribers hear
        :class:`~app.session.events.ConversationStored`, on the session thread like every
        session event, so a window lists it without a restart."""
        self.post(cmd.TellStored(ConversationId(conversation_id), created))

    def shutdown(self) -> None:
        """Stop everything, save every conversation's state, free the engine on the session
        thread; ``ShutdownComplete`` is emitted, then the thread ends."""
        self.cancel_load()
        self.stop(None)
        self.post(cmd.Shutdown())

    def join(self, timeout: float | None = None) -> bool:
        """Wait for the thread to end (after :meth:`shutdown`); True if it did."""
        return self._thread.join(timeout)

    @property
    def is_running(self) -> bool:
        return self._thread.is_alive

    # ================================================================ session thread

    @on_session_thread
    def _handle(self, command: cmd.Command) -> None:
        try:
            self._dispatch(command)
        except LlamaDeskError as exc:
            self._outbox.emit_session(ev.SessionError(str(exc)))
        except Exception as exc:  # a bug: keep the session alive and say so
            log.exception("session command %s failed", type(command).__name__)
            self._outbox.emit_session(
                ev.SessionError(f"Internal error in {type(command).__name__}: {exc}")
            )

    def _dispatch(self, command: cmd.Command) -> None:
        conversations, turns = self._conversations, self._turns
        match command:
            case cmd.LoadModel():
                self._models.load(command)
            case cmd.UnloadModel():
                self._models.unload()
            case cmd.OpenConversation():
                conversations.open(command.conversation_id, command.policy)
            case cmd.CloseConversation():
                conversations.close(command.conversation_id, command.save)
            case cmd.SubmitTurn():
                turns.submit(command)
            case cmd.Answer():
                self._recording.answer(command)
            case cmd.SubmitText():
                turns.submit_text(command)
            case cmd.SubmitTokens():
                turns.submit_tokens(command)
            case cmd.EngineCall():
                turns.engine_call(command)
            case cmd.Regenerate():
                turns.regenerate(command)
            case cmd.ForkConversation():
                conversations.fork(command)
            case cmd.SetPolicy():
                conversations.set_policy(command.conversation_id, command.policy)
            case cmd.SetDefaultPolicy():
                conversations.set_default_policy(command.policy)
            case cmd.Reconfigure():
                self._models.reconfigure(command.settings)
            case cmd.SaveAll():
                self._states.save_all()
            case cmd.SaveStateFile():
                self._states.save_file(command)
            case cmd.RestoreStateFile():
                conversations.restore_file(command)
            case cmd.Inspect():
                command.reply.set_result(conversations.snapshot(command.conversation_id))
            case cmd.DeleteMessage():
                self._recording.delete_message(command)
            case cmd.TellStored():
                stored = ev.ConversationStored(command.conversation_id, command.created)
                self._outbox.emit_session(stored)
            case cmd.Shutdown():
                self._models.release()
                self._thread.close()
                self._outbox.emit_session(ev.ShutdownComplete())


class _Loop:
    """What the session thread's loop drives (:class:`~app.session.session_thread.Worker`)."""

    def __init__(
        self,
        registry: Registry,
        streams: Streams,
        outbox: Outbox,
        models: Models,
        replies: PartialReplies,
        records: SessionRecords,
        library: Library | None,
        handle: Callable[[cmd.Command], None],
    ) -> None:
        self._registry = registry
        self._streams = streams
        self._outbox = outbox
        self._models = models
        self._replies = replies
        self._records = records
        self._library = library
        self.handle = handle

    def busy(self) -> bool:
        engine = self._registry.live()
        return engine is not None and engine.has_work()

    def step(self) -> None:
        engine = self._registry.live()
        if engine is not None:
            self._streams.step(engine)

    def settled(self) -> None:
        self._streams.settled()

    def crashed(self) -> None:
        self._outbox.emit_session(ev.SessionError("Internal error: the engine thread stopped."))
        self._models.close_engine()

    def ended(self) -> None:
        self._replies.close()
        self._records.close()
        if self._library is not None:
            self._library.close()
