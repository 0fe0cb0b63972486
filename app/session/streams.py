"""Running turns: engine steps, and the engine's events turned into the conversations'.

Streamed text is coalesced per conversation (at most every ``stream_interval_s``, one
channel per piece handed out, in order), saved as it streams (:mod:`app.session.replies`),
and counted for the session's generation speed; memory figures and sequence status go out
at most every ``STATS_INTERVAL_S``.
"""

from __future__ import annotations

import time

from app.engine import ContextShifted as EngineShifted
from app.engine import Event as EngineEvent
from app.engine import Evicted as EngineEvicted
from app.engine import Finished as EngineFinished
from app.engine import PromptProgress as EngineProgress
from app.engine import SequenceFailed as EngineFailed
from app.engine import StateRestored as EngineRestored
from app.engine import TokenText as EngineText
from app.engine import ToolCallArguments as EngineCallArguments
from app.engine import ToolCallStarted as EngineCallStarted
from app.errors import LlamaDeskError
from app.session import events as ev
from app.session.engine_port import ConversationEngine
from app.session.outbox import Outbox
from app.session.registry import Conversation, Registry
from app.session.replies import PartialReplies
from app.session.session_thread import on_session_thread
from app.session.states import States
from app.session.types import ConversationId, RestoreOutcome, TurnId, TurnResult

STATS_INTERVAL_S = 0.25  # memory figures and sequence status at most this often
RATE_WINDOW_S = 2.0  # the session's generation speed: tokens of the last seconds


class Streams:
    """See the module docstring."""

    def __init__(
        self,
        registry: Registry,
        outbox: Outbox,
        states: States,
        replies: PartialReplies,
        stream_interval_s: float,
    ) -> None:
        self._registry = registry
        self._outbox = outbox
        self._states = states
        self._replies = replies
        self.stream_interval_s = stream_interval_s
        self._last_stats = 0.0
        self._gen_window: list[float] = []

    @on_session_thread
    def step(self, engine: ConversationEngine) -> None:
        try:
            events = engine.step()
        except LlamaDeskError as exc:
            self._outbox.emit_session(ev.SessionError(str(exc)))
            for key in self._registry.keys():
                if engine.is_busy(key):
                    engine.stop(key)
            return
        self.deliver(engine, events)

    @on_session_thread
    def deliver(self, engine: ConversationEngine, events: list[EngineEvent]) -> None:
        """Turn the engine's events into the conversations' and hand them out."""
        now = time.perf_counter()
        last_piece: tuple[int, int] | None = None
        emit = self._outbox.emit
        dirty = self._registry.dirty
        for event in events:
            conv = self._registry.of_key(event.key)
            if conv is None:
                continue
            if isinstance(event, EngineText):
                stream = conv.stream
                if stream.text and stream.channel is not event.channel:
                    self.flush(conv, now)  # one channel per piece handed out, in order
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
                dirty.add(conv.cid)  # the meter follows the reply (status at most per interval)
            elif isinstance(event, EngineCallStarted | EngineCallArguments):
                self.flush(conv, now)  # the text before the call goes out first
                turn = conv.turn if conv.turn is not None else TurnId(0)
                if isinstance(event, EngineCallStarted):
                    emit(
                        ev.ToolCallStreamed(conv.cid, turn, event.index, event.call_id, event.name)
                    )
                else:
                    emit(ev.ToolCallStreamed(conv.cid, turn, event.index, fragment=event.fragment))
                dirty.add(conv.cid)
            elif isinstance(event, EngineProgress):
                if conv.turn is not None:
                    emit(ev.PromptProgressed(conv.cid, conv.turn, event.done, event.total))
                dirty.add(conv.cid)
            elif isinstance(event, EngineFinished):
                self.flush(conv, now)
                turn, conv.turn = conv.turn or TurnId(0), None
                self._outbox.finish_turn(conv.cid, turn, TurnResult.of(event.completion))
                self._replies.end(conv.cid)
                dirty.add(conv.cid)
            elif isinstance(event, EngineFailed):
                emit(ev.TurnFailed(conv.cid, event.message))
            elif isinstance(event, EngineShifted):
                emit(ev.ContextShifted(conv.cid, event.n_discarded))
                dirty.add(conv.cid)
            elif isinstance(event, EngineEvicted):
                self._states.park(engine, conv)
            elif isinstance(event, EngineRestored):
                # A parked cache came back when the conversation was used, or could not (a
                # rebuilt context too small for it...): say which, with the reason.
                if event.restored:
                    emit(ev.CacheRestored(conv.cid, RestoreOutcome.RESTORED))
                else:
                    emit(ev.CacheRestored(conv.cid, RestoreOutcome.REREAD, event.reason))
                dirty.add(conv.cid)
        self.flush_all(force=False)
        self._replies.tick(now)
        self.emit_stats(force=False)

    @on_session_thread
    def flush(self, conv: Conversation, now: float) -> None:
        stream = conv.stream
        if not stream.text:
            return
        text = "".join(stream.text)
        n = stream.n_tokens
        stream.text.clear()
        stream.n_tokens = 0
        stream.last_emit = now
        turn = conv.turn if conv.turn is not None else TurnId(0)
        self._outbox.emit(ev.TextStreamed(conv.cid, turn, text, stream.channel, n, stream.first_at))

    @on_session_thread
    def flush_all(self, force: bool) -> None:
        now = time.perf_counter()
        for conv in list(self._registry.convs.values()):
            stream = conv.stream
            if stream.text and (force or now - stream.last_emit >= self.stream_interval_s):
                self.flush(conv, now)

    @on_session_thread
    def settled(self) -> None:
        """The last generation ended: hand out everything."""
        self.flush_all(force=True)
        self._replies.tick(time.perf_counter(), force=True)
        self.emit_stats(force=True)

    @on_session_thread
    def emit_stats(self, force: bool) -> None:
        now = time.perf_counter()
        if not force and now - self._last_stats < STATS_INTERVAL_S:
            return
        self._last_stats = now
        self._gen_window = [t for t in self._gen_window if now - t <= RATE_WINDOW_S]
        engine = self._registry.live()
        if engine is None:
            self._outbox.emit_session(ev.MemoryStats(0.0, 0))
            return
        busy = sum(1 for key in self._registry.keys() if engine.is_busy(key))
        tok_s = 0.0
        if self._gen_window and busy:
            tok_s = len(self._gen_window) / max(now - self._gen_window[0], 0.25)
        memory = engine.memory()
        due: list[ConversationId] = list(self._registry.dirty)
        if force:
            due += list(self._registry.convs)
        for cid in due:
            self._outbox.status(cid)
        self._registry.dirty.clear()
        self._outbox.emit_session(
            ev.MemoryStats(
                tok_s,
                busy,
                model_bytes=memory.model_bytes,
                kv_bytes=memory.kv_bytes,
                kv_tokens_held=memory.kv_tokens_held,
                n_ctx=memory.n_ctx,
                loaded=True,
            )
        )
