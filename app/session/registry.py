"""The conversations a session knows, the sequences they are bound to, and their turns'
tickets.

:class:`Registry` holds the engine in use and, per conversation, a :class:`Conversation`
record (its policy, its sequence ``key`` while a model is loaded, the turn it runs, the text
streamed but not handed out yet). The records are the session thread's; what other threads
read (the engine and the keys, for ``Session.stop``; the turn tickets) sits behind a lock.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from app.engine.context_policy import ContextFullPolicy
from app.engine.reasoning import Channel
from app.session import commands as cmd
from app.session.engine_port import ConversationEngine
from app.session.session_thread import on_session_thread
from app.session.types import ConversationId, TurnId


@dataclass
class Stream:
    """Text sampled for one conversation but not handed out yet (all of one channel)."""

    text: list[str] = field(default_factory=list)
    channel: Channel = Channel.ANSWER
    n_tokens: int = 0
    first_at: float = 0.0
    last_emit: float = 0.0


@dataclass
class Conversation:
    cid: ConversationId
    policy: ContextFullPolicy | None = None
    key: int | None = None  # its engine sequence while a model is loaded
    turn: TurnId | None = None  # the turn the engine runs
    last_turn: cmd.SubmitTurn | None = None  # what a regenerate repeats
    stream: Stream = field(default_factory=Stream)


class Registry:
    """See the module docstring."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # guarded by _lock (read by stop() on any thread)
        self._engine: ConversationEngine | None = None
        self._keys: dict[ConversationId, int] = {}
        self._submitted: dict[ConversationId, TurnId] = {}
        self._stopped: dict[ConversationId, TurnId] = {}
        self._next_turn = 0
        # session thread only
        self.convs: dict[ConversationId, Conversation] = {}
        self._by_key: dict[int, ConversationId] = {}
        self.default_policy = ContextFullPolicy.SHIFT
        self.dirty: set[ConversationId] = set()  # their sequence status is due

    # ---------------------------------------------------------------- the engine

    @property
    def engine(self) -> ConversationEngine | None:
        """The engine in use, ready or not."""
        return self._engine

    def live(self) -> ConversationEngine | None:
        """The engine, if it can run turns."""
        engine = self._engine
        return engine if engine is not None and engine.ready else None

    def set_engine(self, engine: ConversationEngine | None) -> ConversationEngine | None:
        """Put ``engine`` in use; returns the one it replaces. Without an engine no
        conversation has a sequence, and none runs a turn."""
        with self._lock:
            old, self._engine = self._engine, engine
            if engine is None:
                self._keys.clear()
        if engine is None:
            self._by_key.clear()
            for conv in self.convs.values():
                conv.key = None
                conv.turn = None
                conv.stream = Stream()
        return old

    # ---------------------------------------------------------------- conversations

    @on_session_thread
    def conv(self, cid: ConversationId) -> Conversation:
        """The conversation's record (made on first use)."""
        conv = self.convs.get(cid)
        if conv is None:
            conv = self.convs[cid] = Conversation(cid)
        return conv

    def get(self, cid: ConversationId) -> Conversation | None:
        return self.convs.get(cid)

    def of_key(self, key: int) -> Conversation | None:
        cid = self._by_key.get(key)
        return self.convs.get(cid) if cid is not None else None

    def keys(self) -> list[int]:
        """The sequences bound to a conversation."""
        return list(self._by_key)

    @on_session_thread
    def set_key(self, conv: Conversation, key: int | None) -> None:
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

    @on_session_thread
    def forget(self, cid: ConversationId) -> None:
        """The conversation is closed: drop its record and tickets."""
        conv = self.convs.pop(cid, None)
        if conv is not None:
            self.set_key(conv, None)
        with self._lock:
            self._submitted.pop(cid, None)
            self._stopped.pop(cid, None)

    # ---------------------------------------------------------------- turn tickets (any thread)

    def new_turn(self, cid: ConversationId) -> TurnId:
        """A ticket for a turn the client submits now (the turn the next stop refers to)."""
        with self._lock:
            self._next_turn += 1
            turn = TurnId(self._next_turn)
            self._submitted[cid] = turn
        return turn

    def cancelled(self, cid: ConversationId, turn: TurnId) -> bool:
        with self._lock:
            return self._stopped.get(cid) == turn

    def stop(self, cid: ConversationId | None) -> None:
        """Stop one conversation's turn (None: all), started or still queued."""
        with self._lock:
            targets = list(self._submitted) if cid is None else [cid]
            for target in targets:
                if target in self._submitted:
                    self._stopped[target] = self._submitted[target]
            keys = [self._keys.get(target) for target in targets]
            engine = self._engine
        if engine is None:
            return
        if cid is None:
            engine.stop(None)
        for key in keys:
            if key is not None:
                engine.stop(key)
