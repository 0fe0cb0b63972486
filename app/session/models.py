"""Model loading: load, unload, rebuild the context, and give the engine up at the end.

A broken file is refused before the loaded model is given up; giving a model up stops
every generation (bounded by ``SHUTDOWN_STEP_S``), saves every open conversation's cache
and frees the engine on the session thread.
"""

from __future__ import annotations

import logging
import threading
import time

from app.engine import ContextSettings
from app.errors import LlamaDeskError
from app.session import commands as cmd
from app.session import events as ev
from app.session.conversations import Conversations
from app.session.engine_port import ConversationEngine, EngineLoader
from app.session.outbox import Outbox
from app.session.registry import Registry
from app.session.replies import PartialReplies
from app.session.session_thread import on_session_thread
from app.session.states import States
from app.session.streams import Streams

log = logging.getLogger(__name__)

SHUTDOWN_STEP_S = 1.0  # how long stopped generations may take to wind down
PROGRESS_INTERVAL_S = 0.05  # load progress events at most this often


class Models:
    """See the module docstring."""

    def __init__(
        self,
        registry: Registry,
        outbox: Outbox,
        states: States,
        streams: Streams,
        conversations: Conversations,
        replies: PartialReplies,
        loader: EngineLoader,
    ) -> None:
        self._registry = registry
        self._outbox = outbox
        self._states = states
        self._streams = streams
        self._conversations = conversations
        self._replies = replies
        self._loader = loader
        self.load_cancel = threading.Event()  # set by any thread: the load gives up

    @on_session_thread
    def load(self, command: cmd.LoadModel) -> None:
        path = command.path
        emit = self._outbox.emit_session
        try:
            self._loader.check(path)
        except LlamaDeskError as exc:
            emit(ev.ModelLoadFailed(path, str(exc)))
            return
        if self.release():
            emit(ev.ModelUnloaded())
        last = [0.0]

        def on_progress(fraction: float) -> bool:
            if self.load_cancel.is_set():
                return False
            now = time.perf_counter()
            if fraction >= 1.0 or now - last[0] > PROGRESS_INTERVAL_S:
                last[0] = now
                emit(ev.ModelLoadProgress(path, float(fraction)))
            return True

        try:
            if command.model_settings is None:
                loaded = self._loader.load(path, command.settings, on_progress, command.fallback)
            else:  # a loader that takes per-model settings (the chat template)
                loaded = self._loader.load(
                    path,
                    command.settings,
                    on_progress,
                    command.fallback,
                    model_settings=command.model_settings,
                )
        except LlamaDeskError as exc:
            emit(ev.ModelLoadFailed(path, str(exc), self.load_cancel.is_set()))
            return
        except Exception as exc:
            log.exception("loading %s failed", path)
            emit(ev.ModelLoadFailed(path, f"Could not load {path}: {exc}"))
            return
        engine = loaded.engine
        self._registry.default_policy = command.default_policy
        engine.set_default_policy(command.default_policy)
        self._registry.set_engine(engine)
        emit(ev.ModelLoaded(engine.describe(), loaded.warning))
        self._conversations.bind_all()

    @on_session_thread
    def unload(self) -> None:
        self.release()
        self._outbox.emit_session(ev.ModelUnloaded())

    @on_session_thread
    def reconfigure(self, settings: ContextSettings) -> None:
        emit = self._outbox.emit_session
        engine = self._registry.live()
        if engine is None:
            emit(ev.ReconfigureFailed("Load a model before changing the context settings."))
            return
        emit(ev.BusyChanged("Saving the tabs' caches and rebuilding the context…"))
        try:
            engine.reconfigure(settings)
        except LlamaDeskError as exc:
            emit(ev.BusyChanged(""))
            emit(ev.ReconfigureFailed(str(exc)))
            self._streams.deliver(engine, engine.take_events())
            return
        emit(ev.BusyChanged(""))
        emit(ev.Reconfigured(engine.describe()))
        # Caches the new context could not take back, and tabs left parked: said per tab.
        self._streams.deliver(engine, engine.take_events())
        for cid in list(self._registry.convs):
            self._outbox.status(cid)

    @on_session_thread
    def release(self) -> bool:
        """Save and free the current engine; True if there was one."""
        engine = self._registry.engine
        if engine is None:
            return False
        self._wind_down(engine)
        self._states.save_all()
        self.close_engine()
        return True

    def close_engine(self) -> None:
        """Free the engine at once (no saving): after a crash, or once everything is saved.
        On the session thread, or on the thread that found it crashed."""
        engine = self._registry.set_engine(None)
        if engine is not None:
            engine.shutdown()

    def _wind_down(self, engine: ConversationEngine) -> None:
        """Stop every generation and step until they finished (bounded)."""
        if not engine.ready:
            return
        engine.stop(None)
        deadline = time.perf_counter() + SHUTDOWN_STEP_S
        while engine.has_work() and time.perf_counter() < deadline:
            self._streams.step(engine)
        self._streams.flush_all(force=True)
        for conv in self._registry.convs.values():  # a turn the engine could not finish in time
            if conv.turn is not None:
                turn, conv.turn = conv.turn, None
                self._outbox.fail_turn(conv.cid, turn, "", aborted=True)
            self._replies.end(conv.cid)
