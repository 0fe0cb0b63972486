"""The session: the engine on its own thread, and the conversations bound to its sequences.

A :class:`Session` owns one :class:`~app.engine.Engine` on a ``threading.Thread``. Its
loop takes commands (:mod:`app.session.commands`) from a queue and, while any sequence is
busy, steps the engine, handling queued commands between steps. It knows conversations
(by :data:`~app.session.types.ConversationId`), never widgets: each conversation's events
go to that conversation's subscribers, the session's own (model loaded, memory figures)
to the session's subscribers. Callbacks run on the session thread: a GUI marshals them.

Stopping does not go through the queue (a queued command would wait for the whole
generation): :meth:`Session.stop` calls the engine's thread-safe ``stop`` and marks the
conversation's pending turn as cancelled in case it has not started yet.

State files: an open conversation's cache is restored from ``states/`` (the
:class:`~app.storage.StateStore`) when its sequence is opened, saved when it is closed, at
shutdown, before a model change, and when the engine evicts it to make room. A client may
also save and restore one at a path of its own (``llamadesk run --save-session``).

Without a store or a database nothing is persisted: the command line runs such a session.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import TypeVar

from app.engine import (
    ContextSettings,
    Engine,
    SamplingParams,
    read_model_info,
)
from app.engine import ContextShifted as EngineShifted
from app.engine import Event as EngineEvent
from app.engine import Evicted as EngineEvicted
from app.engine import Finished as EngineFinished
from app.engine import PromptProgress as EngineProgress
from app.engine import RestoreOutcome as EngineRestore
from app.engine import SequenceFailed as EngineFailed
from app.engine import StateRestored as EngineRestored
from app.engine import TokenText as EngineText
from app.engine.chat_template import ReasoningOptions
from app.engine.reasoning import Channel
from app.errors import LlamaDeskError
from app.session import commands as cmd
from app.session import events as ev
from app.session.replies import PartialReplies
from app.session.types import (
    ChatMessage,
    ContextFullPolicy,
    ConversationId,
    ConversationSnapshot,
    FinishReason,
    LoadedModel,
    RestoreOutcome,
    TurnId,
    TurnResult,
)
from app.storage import Database, StateStore

log = logging.getLogger(__name__)

ConversationCallback = Callable[[ev.ConversationEvent], None]
SessionCallback = Callable[[ev.SessionEvent], None]

STREAM_INTERVAL_S = 0.012  # streamed text is handed out at most this often per conversation
STATS_INTERVAL_S = 0.25  # memory figures and sequence status at most this often
SHUTDOWN_STEP_S = 1.0  # how long stopped generations may take to wind down
_NO_MODEL = "No model is loaded. Load a model in the model manager first."

T = TypeVar("T")


class NoModelError(LlamaDeskError):
    """A :meth:`Session.call` while no model is loaded."""


@dataclass
class _Stream:
    """Text sampled for one conversation but not handed out yet (all of one channel)."""

    text: list[str] = field(default_factory=list)
    channel: Channel = Channel.ANSWER
    n_tokens: int = 0
    first_at: float = 0.0
    last_emit: float = 0.0


@dataclass
class _Conversation:
    cid: ConversationId
    policy: ContextFullPolicy | None = None
    key: int | None = None  # its engine sequence while a model is loaded
    turn: TurnId | None = None  # the turn the engine runs
    last_turn: cmd.SubmitTurn | None = None
    stream: _Stream = field(default_factory=_Stream)


class Session:
    """See the module docstring. Every public method is thread-safe and returns at once."""

    def __init__(
        self,
        store: StateStore | None = None,
        database: Database | None = None,
        *,
        stream_interval_s: float = STREAM_INTERVAL_S,
        name: str = "session",
    ) -> None:
        """``store``: state files (None: caches are not persisted). ``database``: where
        streaming replies are saved (a connection is cloned on the session thread; None:
        not saved)."""
        self._store = store
        self._replies = PartialReplies(database)
        self._stream_interval_s = stream_interval_s
        self._queue: queue.SimpleQueue[cmd.Command] = queue.SimpleQueue()
        self._lock = threading.Lock()
        # guarded by _lock (read by stop() on any thread)
        self._engine: Engine | None = None
        self._keys: dict[ConversationId, int] = {}
        self._submitted: dict[ConversationId, TurnId] = {}
        self._stopped: dict[ConversationId, TurnId] = {}
        self._next_turn = 0
        self._subscribers: dict[ConversationId, list[ConversationCallback]] = {}
        self._session_subscribers: list[SessionCallback] = []
        self._holds = 0  # open batch() blocks: no engine step until they end
        self._released = threading.Condition(self._lock)
        # session thread only
        self._convs: dict[ConversationId, _Conversation] = {}
        self._by_key: dict[int, ConversationId] = {}
        self._default_policy = ContextFullPolicy.SHIFT
        self._load_cancel = threading.Event()
        self._closed = threading.Event()
        self._last_stats = 0.0
        self._gen_window: list[float] = []
        self._dirty: set[ConversationId] = set()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    # ================================================================ subscriptions

    def subscribe(self, conversation_id: int, callback: ConversationCallback) -> Callable[[], None]:
        """Deliver this conversation's events to ``callback`` (on the session thread);
        returns the function that unsubscribes."""
        cid = ConversationId(conversation_id)
        with self._lock:
            self._subscribers.setdefault(cid, []).append(callback)

        def unsubscribe() -> None:
            with self._lock:
                callbacks = self._subscribers.get(cid, [])
                if callback in callbacks:
                    callbacks.remove(callback)
                if not callbacks:
                    self._subscribers.pop(cid, None)

        return unsubscribe

    def subscribe_session(self, callback: SessionCallback) -> Callable[[], None]:
        with self._lock:
            self._session_subscribers.append(callback)

        def unsubscribe() -> None:
            with self._lock:
                if callback in self._session_subscribers:
                    self._session_subscribers.remove(callback)

        return unsubscribe

    # ================================================================ commands (any thread)

    def post(self, command: cmd.Command) -> None:
        """Queue a command for the session thread."""
        self._queue.put(command)

    def load_model(
        self,
        path: str,
        settings: ContextSettings,
        default_policy: ContextFullPolicy = ContextFullPolicy.SHIFT,
        *,
        fallback: bool = True,
    ) -> None:
        """Load a model (``ModelLoaded`` or ``ModelLoadFailed`` follows). Context settings
        the model refuses fall back to the defaults (a warning says so); without
        ``fallback`` the load fails instead."""
        self._load_cancel.clear()
        self.post(cmd.LoadModel(str(path), settings, default_policy, fallback))

    def cancel_load(self) -> None:
        """Give up a model load in progress (its progress callback returns False)."""
        self._load_cancel.set()

    def unload_model(self) -> None:
        self.post(cmd.UnloadModel())

    def open(self, conversation_id: int, policy: ContextFullPolicy | None = None) -> None:
        """Open the conversation: bound to a sequence now (or as soon as a model is loaded)."""
        self.post(cmd.OpenConversation(ConversationId(conversation_id), policy))

    def close(self, conversation_id: int, save: bool = True) -> None:
        """Close the conversation's sequence (a generation is stopped; its cache saved)."""
        self.stop(conversation_id)
        self.post(cmd.CloseConversation(ConversationId(conversation_id), save))

    def _new_turn(self, cid: ConversationId) -> TurnId:
        with self._lock:
            self._next_turn += 1
            turn = TurnId(self._next_turn)
            self._submitted[cid] = turn
        return turn

    def submit(
        self,
        conversation_id: int,
        messages: Iterable[ChatMessage],
        system: str = "",
        sampling: SamplingParams | None = None,
        reasoning: ReasoningOptions | None = None,
        reply_id: int | None = None,
    ) -> TurnId:
        """Generate the reply to ``messages`` (an edit or a regenerate is a submit of the
        history it answers); returns the turn's id."""
        cid = ConversationId(conversation_id)
        turn = self._new_turn(cid)
        self.post(
            cmd.SubmitTurn(
                cid,
                turn,
                tuple(messages),
                system,
                sampling if sampling is not None else SamplingParams(),
                reasoning if reasoning is not None else ReasoningOptions(),
                reply_id,
            )
        )
        return turn

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
        turn = self._new_turn(cid)
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
        turn = self._new_turn(cid)
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
        turn = self._new_turn(cid)
        self.post(cmd.Regenerate(cid, turn, sampling, reply_id))
        return turn

    def stop(self, conversation_id: int | None = None) -> None:
        """Stop one conversation's generation (or all); effective within one micro-batch."""
        with self._lock:
            if conversation_id is None:
                targets = list(self._submitted)
            else:
                targets = [ConversationId(conversation_id)]
            for cid in targets:
                if cid in self._submitted:
                    self._stopped[cid] = self._submitted[cid]
            keys = [self._keys.get(cid) for cid in targets]
            engine = self._engine
        if engine is None:
            return
        if conversation_id is None:
            engine.stop(None)
        for key in keys:
            if key is not None:
                engine.stop(key)

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
        with self._lock:
            self._holds += 1
        try:
            yield
        finally:
            with self._lock:
                self._holds -= 1
                self._released.notify_all()

    def inspect(self, conversation_id: int) -> Future[ConversationSnapshot]:
        """What the session holds for the conversation (answered on the session thread)."""
        future: Future[ConversationSnapshot] = Future()
        self.post(cmd.Inspect(ConversationId(conversation_id), future))
        return future

    def shutdown(self) -> None:
        """Stop everything, save every conversation's state, free the engine on the session
        thread; ``ShutdownComplete`` is emitted, then the thread ends."""
        self.cancel_load()
        self.stop(None)
        self.post(cmd.Shutdown())

    def join(self, timeout: float | None = None) -> bool:
        """Wait for the thread to end (after :meth:`shutdown`); True if it did."""
        self._thread.join(timeout)
        return not self._thread.is_alive()

    @property
    def is_running(self) -> bool:
        return self._thread.is_alive()

    # ================================================================ session thread

    def _run(self) -> None:
        was_busy = False
        try:
            while not self._closed.is_set():
                engine = self._engine
                if engine is not None and engine.context is not None and engine.has_work():
                    was_busy = True
                    self._drain(block=False)
                    self._await_batches()
                    if not self._closed.is_set() and engine is self._engine and engine.has_work():
                        self._step(engine)
                    continue
                if was_busy:  # the last generation ended: hand out everything
                    was_busy = False
                    self._flush_streams(force=True)
                    self._replies.tick(time.perf_counter(), force=True)
                    self._emit_stats(force=True)
                self._drain(block=True)
        except BaseException:  # a bug: say so, and leave nothing half-open
            log.exception("the session thread failed")
            self._emit_session(ev.SessionError("Internal error: the engine thread stopped."))
            self._close_engine()
            self._closed.set()
        finally:
            self._replies.close()

    def _await_batches(self) -> None:
        """While a client's ``batch()`` is open, handle its commands but do not step."""
        while not self._closed.is_set():
            with self._lock:
                if not self._holds:
                    return
                self._released.wait(0.01)
            self._drain(block=False)

    def _drain(self, block: bool) -> None:
        while not self._closed.is_set():
            try:
                command = self._queue.get(timeout=0.5) if block else self._queue.get_nowait()
            except queue.Empty:
                return
            block = False
            self._handle(command)

    def _handle(self, command: cmd.Command) -> None:
        try:
            match command:
                case cmd.LoadModel():
                    self._load_model(command)
                case cmd.UnloadModel():
                    self._unload_model()
                case cmd.OpenConversation():
                    conv = self._conv(command.conversation_id)
                    conv.policy = command.policy
                    self._bind(conv)
                case cmd.CloseConversation():
                    self._close_conversation(command.conversation_id, command.save)
                case cmd.SubmitTurn():
                    self._submit(command)
                case cmd.SubmitText():
                    self._submit_text(command)
                case cmd.SubmitTokens():
                    self._submit_tokens(command)
                case cmd.EngineCall():
                    self._engine_call(command)
                case cmd.Regenerate():
                    self._regenerate(command)
                case cmd.ForkConversation():
                    self._fork(command)
                case cmd.SetPolicy():
                    conv = self._conv(command.conversation_id)
                    conv.policy = command.policy
                    self._apply_policy(conv)
                case cmd.SetDefaultPolicy():
                    self._default_policy = command.policy
                    if self._engine is not None:
                        self._engine.context_full_policy = command.policy.value
                case cmd.Reconfigure():
                    self._reconfigure(command.settings)
                case cmd.SaveAll():
                    self._save_states()
                case cmd.SaveStateFile():
                    self._save_state_file(command)
                case cmd.RestoreStateFile():
                    self._restore_state_file(command)
                case cmd.Inspect():
                    command.reply.set_result(self._snapshot(command.conversation_id))
                case cmd.Shutdown():
                    self._shutdown()
        except LlamaDeskError as exc:
            self._emit_session(ev.SessionError(str(exc)))
        except Exception as exc:  # a bug: keep the session alive and say so
            log.exception("session command %s failed", type(command).__name__)
            self._emit_session(
                ev.SessionError(f"Internal error in {type(command).__name__}: {exc}")
            )

    # ---------------------------------------------------------------- delivery

    def _emit(self, event: ev.ConversationEvent) -> None:
        with self._lock:
            callbacks = list(self._subscribers.get(event.conversation_id, ()))
        for callback in callbacks:
            try:
                callback(event)
            except Exception:
                log.exception("a subscriber of conversation %d failed", event.conversation_id)

    def _emit_session(self, event: ev.SessionEvent) -> None:
        with self._lock:
            callbacks = list(self._session_subscribers)
        for callback in callbacks:
            try:
                callback(event)
            except Exception:
                log.exception("a session subscriber failed")

    # ---------------------------------------------------------------- stepping

    def _step(self, engine: Engine) -> None:
        try:
            events = engine.step()
        except LlamaDeskError as exc:
            self._emit_session(ev.SessionError(str(exc)))
            for key in list(self._by_key):
                if engine.is_busy(key):
                    engine.stop(key)
            return
        self._deliver(engine, events)

    def _deliver(self, engine: Engine, events: list[EngineEvent]) -> None:
        """Turn the engine's events into the conversations' and hand them out."""
        now = time.perf_counter()
        last_piece: tuple[int, int] | None = None
        for event in events:
            cid = self._by_key.get(event.key)
            conv = self._convs.get(cid) if cid is not None else None
            if conv is None:
                continue
            if isinstance(event, EngineText):
                stream = conv.stream
                if stream.text and stream.channel is not event.channel:
                    self._flush_stream(conv, now)  # one channel per piece handed out, in order
                if not stream.text:
                    stream.first_at = now
                    stream.channel = event.channel
                stream.text.append(event.text)
                # one token may give a reasoning piece and an answer piece: count it once
                if event.token >= 0 and last_piece != (event.key, event.token):
                    stream.n_tokens += 1
                    self._gen_window.append(now)
                last_piece = (event.key, event.token)
                self._replies.add(conv.cid, event.text, event.channel, now)
            elif isinstance(event, EngineProgress):
                if conv.turn is not None:
                    self._emit(ev.PromptProgressed(conv.cid, conv.turn, event.done, event.total))
                self._dirty.add(conv.cid)
            elif isinstance(event, EngineFinished):
                self._flush_stream(conv, now)
                self._replies.end(conv.cid)
                turn, conv.turn = conv.turn, None
                self._emit(
                    ev.TurnFinished(conv.cid, turn or TurnId(0), TurnResult.of(event.completion))
                )
                self._dirty.add(conv.cid)
            elif isinstance(event, EngineFailed):
                self._emit(ev.TurnFailed(conv.cid, event.message))
            elif isinstance(event, EngineShifted):
                self._emit(ev.ContextShifted(conv.cid, event.n_discarded))
                self._dirty.add(conv.cid)
            elif isinstance(event, EngineEvicted):
                self._park(engine, conv)
            elif isinstance(event, EngineRestored):
                # A parked cache came back when the conversation was used, or could not (a
                # rebuilt context too small for it...): say which, with the reason.
                if event.restored:
                    self._emit(ev.CacheRestored(conv.cid, RestoreOutcome.RESTORED))
                else:
                    self._emit(ev.CacheRestored(conv.cid, RestoreOutcome.REREAD, event.reason))
                self._dirty.add(conv.cid)
        self._flush_streams(force=False)
        self._replies.tick(now)
        self._emit_stats(force=False)

    def _flush_stream(self, conv: _Conversation, now: float) -> None:
        stream = conv.stream
        if not stream.text:
            return
        text = "".join(stream.text)
        n = stream.n_tokens
        stream.text.clear()
        stream.n_tokens = 0
        stream.last_emit = now
        turn = conv.turn if conv.turn is not None else TurnId(0)
        self._emit(ev.TextStreamed(conv.cid, turn, text, stream.channel, n, stream.first_at))

    def _flush_streams(self, force: bool) -> None:
        now = time.perf_counter()
        for conv in list(self._convs.values()):
            stream = conv.stream
            if stream.text and (force or now - stream.last_emit >= self._stream_interval_s):
                self._flush_stream(conv, now)

    def _emit_stats(self, force: bool) -> None:
        now = time.perf_counter()
        if not force and now - self._last_stats < STATS_INTERVAL_S:
            return
        self._last_stats = now
        self._gen_window = [t for t in self._gen_window if now - t <= 2.0]
        engine = self._engine
        if engine is None or engine.context is None:
            self._emit_session(ev.MemoryStats(0.0, 0))
            return
        busy = sum(1 for key in self._by_key if engine.is_busy(key))
        tok_s = 0.0
        if self._gen_window and busy:
            tok_s = len(self._gen_window) / max(now - self._gen_window[0], 0.25)
        memory = engine.memory()
        for cid in list(self._dirty) + (list(self._convs) if force else []):
            self._emit_status(cid)
        self._dirty.clear()
        self._emit_session(
            ev.MemoryStats(
                tok_s,
                busy,
                model_bytes=int(memory.get("model_bytes", 0)),
                kv_bytes=int(memory.get("kv_bytes", 0)),
                kv_tokens_held=int(memory.get("kv_tokens_held", 0)),
                n_ctx=int(memory.get("n_ctx", 0)),
                loaded=True,
            )
        )

    def _emit_status(self, cid: ConversationId) -> None:
        engine = self._engine
        conv = self._convs.get(cid)
        if engine is None or engine.context is None or conv is None or conv.key is None:
            return
        try:
            info = engine.info(conv.key)
        except LlamaDeskError:
            return
        self._emit(
            ev.SequenceStatus(
                cid,
                info.n_tokens,
                info.n_ctx,
                info.resident,
                info.busy,
                info.generating,
                n_reserved=info.n_reserved,
                n_dropped=info.n_dropped,
            )
        )

    # ---------------------------------------------------------------- conversations

    def _conv(self, cid: ConversationId) -> _Conversation:
        conv = self._convs.get(cid)
        if conv is None:
            conv = self._convs[cid] = _Conversation(cid)
        return conv

    def _set_key(self, conv: _Conversation, key: int | None) -> None:
        if conv.key is not None:
            self._by_key.pop(conv.key, None)
        conv.key = key
        with self._lock:
            if key is None:
                self._keys.pop(conv.cid, None)
            else:
                self._keys[conv.cid] = key
        if key is not None:
            self._by_key[key] = conv.cid

    def _apply_policy(self, conv: _Conversation) -> None:
        engine = self._engine
        if engine is not None and engine.context is not None and conv.key is not None:
            engine.set_policy(conv.key, conv.policy.value if conv.policy is not None else None)

    def _bind(self, conv: _Conversation) -> None:
        """Give the conversation a sequence, restoring its state file when one exists."""
        engine = self._engine
        if engine is None or engine.context is None or conv.key is not None:
            return
        key = engine.open_sequence()
        self._set_key(conv, key)
        self._apply_policy(conv)
        outcome, reason = RestoreOutcome.EMPTY, None
        data = self._store.get(conv.cid, engine.model_fingerprint) if self._store else None
        if data is not None:
            outcome, reason = self._restore_into(
                engine, key, lambda: engine.restore_state_outcome(key, data)
            )
            if outcome is RestoreOutcome.REREAD:
                log.info("state of conversation %d not restored: %s", conv.cid, reason)
        self._emit(ev.CacheRestored(conv.cid, outcome, reason))
        self._deliver(engine, engine.take_events())  # tabs that left to make room
        self._emit_status(conv.cid)

    @staticmethod
    def _restore_into(
        engine: Engine, key: int, restore: Callable[[], EngineRestore]
    ) -> tuple[RestoreOutcome, str | None]:
        """Run ``restore`` and say truthfully what it did: RESTORED (the cache holds it),
        PARKED (waiting for room, with the reason) or REREAD (refused: the sequence is
        emptied and its text re-read with the next turn)."""
        try:
            result = restore()
            reason = engine.last_restore_error
        except LlamaDeskError as exc:
            result, reason = EngineRestore.REFUSED, str(exc)
        if result is EngineRestore.RESTORED:
            return RestoreOutcome.RESTORED, None
        if result is EngineRestore.PARKED:
            return RestoreOutcome.PARKED, reason
        # Refused (other settings, damaged...): the text is re-processed later.
        engine.clear_sequence(key)
        return RestoreOutcome.REREAD, reason or "the saved cache could not be used."

    def _close_conversation(self, cid: ConversationId, save: bool) -> None:
        conv = self._convs.get(cid)
        if conv is None:
            return
        engine = self._engine
        if engine is not None and engine.context is not None and conv.key is not None:
            key = conv.key
            if engine.is_busy(key):
                engine.stop(key)
                while engine.is_busy(key):
                    self._step(engine)  # its TurnFinished (aborted) goes out
            self._flush_stream(conv, time.perf_counter())
            if save:
                self._save_one(engine, conv)
            engine.close_sequence(key)
        self._set_key(conv, None)
        self._replies.end(cid)
        del self._convs[cid]
        with self._lock:
            self._submitted.pop(cid, None)
            self._stopped.pop(cid, None)
        self._emit(ev.ConversationClosed(cid))

    def _fail_turn(self, cid: ConversationId, turn: TurnId, message: str, aborted: bool) -> None:
        if not aborted:
            self._emit(ev.TurnFailed(cid, message))
        reason = FinishReason.ABORTED if aborted else FinishReason.ERROR
        result = TurnResult(finish_reason=reason, error=None if aborted else message)
        self._emit(ev.TurnFinished(cid, turn, result))

    def _cancelled(self, cid: ConversationId, turn: TurnId) -> bool:
        with self._lock:
            return self._stopped.get(cid) == turn

    def _submit(self, command: cmd.SubmitTurn) -> None:
        def queue_prompt(engine: Engine, key: int) -> int:
            params = command.sampling
            return engine.set_chat(
                key,
                [m.to_engine() for m in command.messages],
                system=command.system or None,
                reserve=params.max_tokens if params.max_tokens > 0 else None,
                reasoning=command.reasoning,
            )

        self._start_turn(
            command.conversation_id,
            command.turn_id,
            command.sampling,
            command.reply_id,
            queue_prompt,
            command,
        )

    def _submit_text(self, command: cmd.SubmitText) -> None:
        def queue_prompt(engine: Engine, key: int) -> int:
            if not command.append:
                return engine.set_prompt(key, command.text, raw=True)
            if command.text:
                engine.append_text(key, command.text)
            return len(engine.pending_tokens(key))

        self._start_turn(
            command.conversation_id,
            command.turn_id,
            command.sampling,
            command.reply_id,
            queue_prompt,
            None,
        )

    def _submit_tokens(self, command: cmd.SubmitTokens) -> None:
        self._start_turn(
            command.conversation_id,
            command.turn_id,
            command.sampling,
            command.reply_id,
            lambda engine, key: engine.set_tokens(key, list(command.tokens)),
            None,
        )

    def _engine_call(self, command: cmd.EngineCall) -> None:
        if not command.reply.set_running_or_notify_cancel():
            return
        engine = self._engine
        if engine is None or engine.context is None:
            command.reply.set_exception(NoModelError(_NO_MODEL))
            return
        try:
            command.reply.set_result(command.fn(engine))
        except BaseException as exc:  # the caller's function: its error is its result
            command.reply.set_exception(exc)

    def _start_turn(
        self,
        cid: ConversationId,
        turn: TurnId,
        params: SamplingParams,
        reply_id: int | None,
        queue_prompt: Callable[[Engine, int], int],
        last_turn: cmd.SubmitTurn | None,
    ) -> None:
        """Queue a turn's prompt (``queue_prompt(engine, key)`` returns how many tokens it
        decodes) and start generating; ``last_turn``: what a regenerate repeats."""
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
            params.validate()
            n = queue_prompt(engine, conv.key)
            engine.start(conv.key, params)
        except LlamaDeskError as exc:
            self._fail_turn(cid, turn, str(exc), aborted=False)
            return
        conv.turn = turn
        conv.last_turn = last_turn
        conv.stream = _Stream()
        self._replies.begin(cid, reply_id)
        self._emit(ev.TurnStarted(cid, turn, n))
        self._dirty.add(cid)
        if self._cancelled(cid, turn):  # a stop that raced with the start
            engine.stop(conv.key)

    def _regenerate(self, command: cmd.Regenerate) -> None:
        conv = self._conv(command.conversation_id)
        last = conv.last_turn
        if last is None:
            self._fail_turn(
                conv.cid, command.turn_id, "There is no turn to regenerate yet.", aborted=False
            )
            return
        self._submit(
            replace(
                last,
                turn_id=command.turn_id,
                sampling=command.sampling if command.sampling is not None else last.sampling,
                reply_id=command.reply_id,
            )
        )

    def _fork_point(self, engine: Engine, key: int, command: cmd.ForkConversation) -> int:
        """How many of the source's cached tokens are the fork's messages (a message
        boundary): the rendered history's common prefix with what the cache holds."""
        messages = [m.to_engine() for m in command.messages if m.role != "system"]
        if command.system:
            messages.insert(0, {"role": "system", "content": command.system})
        text = engine.render_chat(messages, add_generation_prompt=False)
        wanted = engine.tokenize(text, add_special=True, parse_special=True)
        held = engine.tokens(key)
        n = 0
        for a, b in zip(wanted, held, strict=False):
            if a != b:
                break
            n += 1
        return n

    def _fork(self, command: cmd.ForkConversation) -> None:
        engine = self._engine
        target = self._conv(command.target)
        target.policy = command.policy
        if engine is None or engine.context is None or target.key is not None:
            return
        source = self._convs.get(command.source)
        key: int | None = None
        n = 0
        if source is not None and source.key is not None and not engine.is_busy(source.key):
            try:
                n = self._fork_point(engine, source.key, command)
                key = engine.fork(source.key, n)
            except LlamaDeskError as exc:
                log.info("fork without the cache (%s)", exc)
                key, n = None, 0
        if key is None:
            self._bind(target)
        else:
            self._set_key(target, key)
            self._apply_policy(target)
        self._emit(ev.ConversationForked(target.cid, command.source, n))
        self._emit_status(target.cid)

    def _park(self, engine: Engine, conv: _Conversation) -> None:
        """An evicted sequence's cache goes to its state file (it comes back from there)."""
        saved = False
        if self._store is not None and conv.key is not None:
            try:
                data = engine.parked_state(conv.key)
                if data is not None:
                    saved = self._store.put(conv.cid, engine.model_fingerprint, data) is not None
            except LlamaDeskError as exc:
                log.warning("could not save the state of conversation %d: %s", conv.cid, exc)
        self._emit(ev.CacheParked(conv.cid, saved))
        self._emit_status(conv.cid)

    def _snapshot(self, cid: ConversationId) -> ConversationSnapshot:
        conv = self._convs.get(cid)
        engine = self._engine
        if conv is None:
            return ConversationSnapshot(cid, open=False, default_policy=self._default_policy)
        reasoning = conv.last_turn.reasoning if conv.last_turn is not None else None
        if engine is None or engine.context is None or conv.key is None:
            return ConversationSnapshot(
                cid,
                open=True,
                policy=conv.policy,
                default_policy=self._default_policy,
                reasoning=reasoning,
            )
        info = engine.info(conv.key)
        return ConversationSnapshot(
            cid,
            open=True,
            tokens=tuple(engine.tokens(conv.key)),
            n_ctx=info.n_ctx,
            resident=info.resident,
            busy=info.busy,
            policy=conv.policy,
            default_policy=self._default_policy,
            reasoning=reasoning,
        )

    # ---------------------------------------------------------------- states

    def _save_one(self, engine: Engine, conv: _Conversation) -> None:
        if self._store is None or conv.key is None:
            return
        try:
            if not engine.tokens(conv.key) and not engine.pending_tokens(conv.key):
                return
            data = engine.save_state(conv.key)
        except LlamaDeskError as exc:
            log.warning("could not save the state of conversation %d: %s", conv.cid, exc)
            return
        self._store.put(conv.cid, engine.model_fingerprint, data)

    def _idle_key(self, cid: ConversationId) -> tuple[Engine, int]:
        """The engine and the open conversation's sequence, which must not be answering."""
        engine = self._engine
        if engine is None or engine.context is None:
            raise LlamaDeskError(_NO_MODEL)
        conv = self._convs.get(cid)
        if conv is None or conv.key is None:
            raise LlamaDeskError(f"Conversation {cid} is not open.")
        if conv.turn is not None or engine.is_busy(conv.key):
            raise LlamaDeskError("This conversation is still answering.")
        return engine, conv.key

    def _save_state_file(self, command: cmd.SaveStateFile) -> None:
        reply = command.reply
        if not reply.set_running_or_notify_cancel():
            return
        try:
            engine, key = self._idle_key(command.conversation_id)
            size = engine.save_state_file(key, command.path)
        except LlamaDeskError as exc:
            reply.set_exception(exc)
            return
        reply.set_result(size)

    def _restore_state_file(self, command: cmd.RestoreStateFile) -> None:
        reply = command.reply
        if not reply.set_running_or_notify_cancel():
            return
        cid = command.conversation_id
        try:
            if self._engine is not None and self._engine.context is not None:
                self._bind(self._conv(cid))
            engine, key = self._idle_key(cid)
            outcome, reason = self._restore_into(
                engine, key, lambda: engine.restore_state_file_outcome(key, command.path)
            )
            if outcome is RestoreOutcome.REREAD:
                log.info("state file %s not restored: %s", command.path, reason)
        except LlamaDeskError as exc:
            reply.set_exception(exc)
            return
        event = ev.CacheRestored(cid, outcome, reason)
        self._emit(event)
        self._deliver(engine, engine.take_events())
        self._emit_status(cid)
        reply.set_result(event)

    def _save_states(self) -> None:
        engine = self._engine
        if engine is None or engine.context is None or self._store is None:
            return
        for conv in list(self._convs.values()):
            if conv.key is not None and not engine.is_busy(conv.key):
                self._save_one(engine, conv)

    # ---------------------------------------------------------------- model

    def _loaded_model(self, engine: Engine) -> LoadedModel:
        model = engine.model
        assert model is not None
        memory = engine.memory()
        template = engine.template
        return LoadedModel(
            info=engine.model_info,
            settings=engine.settings,
            fingerprint=engine.model_fingerprint,
            model_bytes=model.size_bytes,
            kv_bytes=int(memory["kv_bytes"]),
            n_ctx=int(memory["n_ctx"]),
            n_ctx_seq=engine.n_ctx_seq,
            supports_thinking_toggle=bool(getattr(template, "supports_thinking_toggle", False)),
            supports_effort=bool(getattr(template, "supports_effort", False)),
        )

    def _wind_down(self, engine: Engine) -> None:
        """Stop every generation and step until they finished (bounded)."""
        if engine.context is None:
            return
        engine.stop(None)
        deadline = time.perf_counter() + SHUTDOWN_STEP_S
        while engine.has_work() and time.perf_counter() < deadline:
            self._step(engine)
        self._flush_streams(force=True)
        for conv in self._convs.values():  # a turn the engine could not finish in time
            if conv.turn is not None:
                turn, conv.turn = conv.turn, None
                self._fail_turn(conv.cid, turn, "", aborted=True)
            self._replies.end(conv.cid)

    def _close_engine(self) -> None:
        with self._lock:
            engine, self._engine = self._engine, None
            self._keys.clear()
        self._by_key.clear()
        for conv in self._convs.values():
            conv.key = None
            conv.turn = None
            conv.stream = _Stream()
        if engine is not None:
            engine.close()

    def _release_engine(self) -> bool:
        """Save and free the current engine; True if there was one."""
        engine = self._engine
        if engine is None:
            return False
        self._wind_down(engine)
        self._save_states()
        self._close_engine()
        return True

    def _load_model(self, command: cmd.LoadModel) -> None:
        path = command.path
        try:
            # A broken file is refused before the loaded model is given up.
            read_model_info(path)
        except LlamaDeskError as exc:
            self._emit_session(ev.ModelLoadFailed(path, str(exc)))
            return
        if self._release_engine():
            self._emit_session(ev.ModelUnloaded())
        last = [0.0]

        def on_progress(fraction: float) -> bool:
            if self._load_cancel.is_set():
                return False
            now = time.perf_counter()
            if fraction >= 1.0 or now - last[0] > 0.05:
                last[0] = now
                self._emit_session(ev.ModelLoadProgress(path, float(fraction)))
            return True

        settings = command.settings
        warning: str | None = None
        engine = Engine()
        try:
            engine.load_model(path, progress=on_progress)
            try:
                engine.create_context(settings)
            except LlamaDeskError as exc:
                if not command.fallback:
                    raise
                # The saved settings do not suit this model: fall back to the defaults.
                engine.create_context(
                    ContextSettings(
                        n_threads=settings.n_threads, n_threads_batch=settings.n_threads_batch
                    )
                )
                warning = f"{exc} LlamaDesk used the default context settings instead."
        except LlamaDeskError as exc:
            engine.close()
            cancelled = self._load_cancel.is_set()
            self._emit_session(ev.ModelLoadFailed(path, str(exc), cancelled))
            return
        except Exception as exc:
            engine.close()
            log.exception("loading %s failed", path)
            self._emit_session(ev.ModelLoadFailed(path, f"Could not load {path}: {exc}"))
            return
        self._default_policy = command.default_policy
        engine.context_full_policy = self._default_policy.value
        with self._lock:
            self._engine = engine
        self._emit_session(ev.ModelLoaded(self._loaded_model(engine), warning))
        for conv in list(self._convs.values()):
            self._bind(conv)

    def _unload_model(self) -> None:
        self._release_engine()
        self._emit_session(ev.ModelUnloaded())

    def _reconfigure(self, settings: ContextSettings) -> None:
        engine = self._engine
        if engine is None or engine.context is None:
            self._emit_session(
                ev.ReconfigureFailed("Load a model before changing the context settings.")
            )
            return
        self._emit_session(ev.BusyChanged("Saving the tabs' caches and rebuilding the context…"))
        try:
            engine.reconfigure(settings)
        except LlamaDeskError as exc:
            self._emit_session(ev.BusyChanged(""))
            self._emit_session(ev.ReconfigureFailed(str(exc)))
            self._deliver(engine, engine.take_events())
            return
        self._emit_session(ev.BusyChanged(""))
        self._emit_session(ev.Reconfigured(self._loaded_model(engine)))
        # Caches the new context could not take back, and tabs left parked: said per tab.
        self._deliver(engine, engine.take_events())
        for cid in list(self._convs):
            self._emit_status(cid)

    def _shutdown(self) -> None:
        self._release_engine()
        self._closed.set()
        self._emit_session(ev.ShutdownComplete())
