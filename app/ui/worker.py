"""The engine's thread: an :class:`EngineWorker` owns the :class:`~app.engine.Engine`.

The worker lives on its own ``QThread`` (created without a parent, ``moveToThread``). The
GUI never calls into the engine: it puts commands on a thread-safe queue (the public
methods below do that and wake the worker with a queued signal). While any sequence is
busy the worker runs ``engine.step()`` in short bursts, handling queued commands between
steps and giving its own event loop a turn, so nothing waits on the GUI.

Stopping does not go through the queue (a queued command would arrive after the whole
generation): :meth:`stop` runs on the GUI thread and calls ``engine.stop(key)``, which the
engine documents as thread-safe, and also marks the tab's pending generation as cancelled
in case the worker has not started it yet.

Everything emitted is plain data: ints, strings, floats, dicts and lists of those.
Tabs are identified by their conversation id; the worker maps them to engine sequence keys.
"""

from __future__ import annotations

import inspect
import logging
import queue
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from PySide6.QtCore import QObject, Qt, QThread, QTimer, Signal, Slot

from app.engine import (
    Completion,
    ContextSettings,
    ContextShifted,
    Engine,
    Evicted,
    Finished,
    PromptProgress,
    SamplingParams,
    SequenceFailed,
    TokenText,
    read_model_info,
)
from app.engine.chat_template import ReasoningEffort, ReasoningOptions
from app.engine.reasoning import Channel
from app.errors import LlamaDeskError
from app.storage import StateStore

log = logging.getLogger(__name__)

# How long the worker steps before it gives its own event loop a turn (seconds).
_BURST_S = 0.010
# Streamed text is handed to the GUI at most this often per tab (seconds).
_EMIT_INTERVAL_S = 0.012
# How long a thread may hold the GIL while another waits for it (seconds).
GIL_SWITCH_INTERVAL_S = 0.001
# Sequence figures (context meter, residency) at most this often (seconds).
_STATS_INTERVAL_S = 0.25
# A conversation's reasoning choices, kept in its sampling dict (SamplingParams ignores them).
THINKING_KEY = "enable_thinking"  # bool, default True (as llama.cpp's server)
EFFORT_KEY = "reasoning_effort"  # "low" | "medium" | "high", default "medium"
DEFAULT_EFFORT = "medium"


def reasoning_options(sampling: dict[str, Any]) -> ReasoningOptions:
    """The reasoning choices a conversation's sampling dict holds (defaults: on, medium)."""
    enable = sampling.get(THINKING_KEY, True)
    try:
        effort = ReasoningEffort(str(sampling.get(EFFORT_KEY) or DEFAULT_EFFORT))
    except ValueError:
        effort = ReasoningEffort(DEFAULT_EFFORT)
    return ReasoningOptions(enable_thinking=enable is not False, effort=effort)


def _takes_reasoning(engine: Engine) -> bool:
    try:
        return "reasoning" in inspect.signature(engine.set_chat).parameters
    except (TypeError, ValueError):
        return False


def completion_dict(completion: Completion) -> dict[str, Any]:
    """A :class:`Completion` as plain data (what ``finished`` carries)."""
    return {
        "text": completion.text,
        "n_tokens": len(completion.tokens),
        "finish_reason": completion.finish_reason,
        "n_prompt": completion.n_prompt,
        "n_prompt_processed": completion.n_prompt_processed,
        "prompt_ms": completion.prompt_ms,
        "gen_ms": completion.gen_ms,
        "tokens_per_second": completion.tokens_per_second,
        "prompt_tokens_per_second": completion.prompt_tokens_per_second,
        "error": completion.error,
        "reasoning": getattr(completion, "reasoning", "") or "",
        "reasoning_ms": getattr(completion, "reasoning_ms", None),
    }


@dataclass
class _Stream:
    """Text sampled for one tab but not handed to the GUI yet (all of one channel)."""

    text: list[str] = field(default_factory=list)
    reasoning: bool = False  # the buffered text is reasoning (else answer)
    n_tokens: int = 0
    first_at: float = 0.0  # perf_counter of the oldest piece (token-to-paint latency)
    last_emit: float = 0.0


class EngineWorker(QObject):
    """Runs the engine on its thread; see the module docstring."""

    # tab_id, text, number of tokens, perf_counter() when the oldest piece was sampled
    tokens = Signal(int, str, int, float)  # the answer
    reasoning = Signal(int, str, int, float)  # a reasoning model's thinking (same arguments)
    progress = Signal(int, int, int)  # tab_id, done, total (prompt processing)
    started = Signal(int, int)  # tab_id, tokens to process (after the cached prefix)
    finished = Signal(int, dict)  # tab_id, completion_dict
    failed = Signal(int, str)  # tab_id, message
    shifted = Signal(int, int)  # tab_id, tokens dropped from the context
    tabInfo = Signal(int, dict)  # tab_id, {n_tokens, n_ctx, resident, busy, saved, restored}
    stats = Signal(dict)  # {"tok_s": total generation speed, "busy": n busy tabs}
    modelLoaded = Signal(dict)  # model info + "settings", "fingerprint", "size_bytes", "n_ctx_seq"
    modelUnloaded = Signal()
    loadProgress = Signal(float)
    loadFailed = Signal(str, str)  # path, message
    reconfigured = Signal(dict)  # the context settings now in use
    reconfigureFailed = Signal(str)
    busyMessage = Signal(str)  # a long operation is running ("" when done)
    error = Signal(str)
    shutdownDone = Signal()

    _wake = Signal()

    def __init__(self, store: StateStore | None = None) -> None:
        super().__init__(None)
        self._store = store
        self._engine: Engine | None = None
        self._commands: queue.SimpleQueue[tuple[str, tuple[Any, ...]]] = queue.SimpleQueue()
        self._keys: dict[int, int] = {}  # tab id -> engine key
        self._tabs: dict[int, int] = {}  # engine key -> tab id
        self._lock = threading.Lock()
        self._gui_gen: dict[int, int] = {}  # tab id -> last generation id submitted (GUI side)
        self._stop_gen: dict[int, int] = {}  # tab id -> generation id the user stopped
        self._running_gen: dict[int, int] = {}  # tab id -> generation id the engine runs
        self._next_gen = 0
        self._load_cancel = threading.Event()
        self._streams: dict[int, _Stream] = {}
        self._pumping = False
        self._closed = False
        self._last_stats = 0.0
        self._gen_window: list[tuple[float, int]] = []  # (time, tokens) for total tok/s
        self._dirty_info: set[int] = set()
        self._policies: dict[int, str | None] = {}  # tab id -> its context-full policy
        self._default_policy = "shift"
        self._wake.connect(self._pump, Qt.ConnectionType.QueuedConnection)

    # ================================================================ GUI-thread API
    # These only enqueue a command (or, for stop, touch thread-safe state).

    def _post(self, name: str, *args: Any) -> None:
        self._commands.put((name, args))
        self._wake.emit()

    def load_model(self, path: str, settings: dict[str, Any], policy: str = "shift") -> None:
        self._load_cancel.clear()
        self._post("load_model", path, dict(settings), policy)

    def cancel_load(self) -> None:
        self._load_cancel.set()

    def unload_model(self) -> None:
        self._post("unload_model")

    def open_tab(self, tab_id: int) -> None:
        """Bind a tab to a sequence, restoring its saved state file when one exists."""
        self._post("open_tab", tab_id)

    def close_tab(self, tab_id: int, save: bool = True) -> None:
        self._post("close_tab", tab_id, save)

    def submit(
        self,
        tab_id: int,
        messages: list[dict[str, Any]],
        system: str,
        sampling: dict[str, Any],
    ) -> int:
        """Generate a reply to ``messages``; returns the generation id."""
        with self._lock:
            self._next_gen += 1
            gen = self._next_gen
            self._gui_gen[tab_id] = gen
        self._post("submit", tab_id, gen, [dict(m) for m in messages], system, dict(sampling))
        return gen

    def stop(self, tab_id: int | None = None) -> None:
        """Stop one tab's generation (or all); effective within one micro-batch."""
        with self._lock:
            targets = list(self._gui_gen) if tab_id is None else [tab_id]
            for tab in targets:
                if tab in self._gui_gen:
                    self._stop_gen[tab] = self._gui_gen[tab]
            keys = [self._keys.get(tab) for tab in targets]
        engine = self._engine
        if engine is None:
            return
        if tab_id is None:
            engine.stop(None)
        for key in keys:
            if key is not None:
                engine.stop(key)
        self._wake.emit()

    def fork(self, src_tab: int, dst_tab: int, messages: list[dict[str, Any]], system: str) -> None:
        """Open ``dst_tab`` holding ``src_tab``'s cache up to the end of ``messages``."""
        self._post("fork", src_tab, dst_tab, [dict(m) for m in messages], system)

    def reconfigure(self, settings: dict[str, Any]) -> None:
        self._post("reconfigure", dict(settings))

    def set_default_policy(self, policy: str) -> None:
        """What a full context does in tabs without a choice of their own."""
        self._post("set_default_policy", policy)

    def set_policy(self, tab_id: int, policy: str | None) -> None:
        """This tab's context-full policy ("shift" or "stop"; None: the default)."""
        self._post("set_policy", tab_id, policy)

    def save_all(self) -> None:
        """Write the state file of every tab (keeps them open)."""
        self._post("save_all")

    def shutdown(self) -> None:
        """Stop everything, save every tab's state, free the engine; emits ``shutdownDone``."""
        self.stop(None)
        self._post("shutdown")

    def call(self, func: Callable[[Engine | None], Any], reply: Callable[[Any], None]) -> None:
        """Run ``func(engine)`` on the worker thread (tests and diagnostics only)."""
        self._post("call", func, reply)

    # ================================================================ worker thread

    @Slot()
    def _pump(self) -> None:
        if self._pumping:
            return
        self._pumping = True
        try:
            deadline = time.perf_counter() + _BURST_S
            while True:
                self._drain_commands()
                if self._closed:
                    return
                engine = self._engine
                if engine is None or engine.context is None or not engine.has_work():
                    self._flush_streams(force=True)
                    self._emit_stats(force=True)
                    return
                self._step(engine)
                if time.perf_counter() >= deadline:
                    # Let the thread's event loop run (queued signals), then go on.
                    QTimer.singleShot(0, self._pump)
                    return
        finally:
            self._pumping = False

    def _drain_commands(self) -> None:
        while True:
            try:
                name, args = self._commands.get_nowait()
            except queue.Empty:
                return
            if self._closed:
                continue
            try:
                getattr(self, "_do_" + name)(*args)
            except LlamaDeskError as exc:
                self.error.emit(str(exc))
            except Exception as exc:  # a bug: keep the worker alive and say so
                log.exception("worker command %s failed", name)
                self.error.emit(f"Internal error in {name}: {exc}")

    def _step(self, engine: Engine) -> None:
        try:
            events = engine.step()
        except LlamaDeskError as exc:
            self.error.emit(str(exc))
            for key in list(self._tabs):
                if engine.is_busy(key):
                    engine.stop(key)
            return
        now = time.perf_counter()
        last_piece: tuple[int, int] | None = None  # (key, token) of the previous text piece
        for event in events:
            tab = self._tabs.get(event.key)
            if tab is None:
                continue
            if isinstance(event, TokenText):
                stream = self._streams.setdefault(tab, _Stream())
                is_reasoning = getattr(event, "channel", Channel.ANSWER) is Channel.REASONING
                if stream.text and stream.reasoning != is_reasoning:
                    self._flush_stream(tab, now)  # one channel per emitted piece, in order
                if not stream.text:
                    stream.first_at = now
                    stream.reasoning = is_reasoning
                stream.text.append(event.text)
                # one token may give a reasoning piece and an answer piece: count it once
                if event.token >= 0 and last_piece != (event.key, event.token):
                    stream.n_tokens += 1
                    self._gen_window.append((now, 1))
                last_piece = (event.key, event.token)
            elif isinstance(event, PromptProgress):
                self.progress.emit(tab, event.done, event.total)
                self._dirty_info.add(tab)
            elif isinstance(event, Finished):
                self._flush_stream(tab, now)
                self._running_gen.pop(tab, None)
                self.finished.emit(tab, completion_dict(event.completion))
                self._dirty_info.add(tab)
            elif isinstance(event, SequenceFailed):
                self.failed.emit(tab, event.message)
            elif isinstance(event, ContextShifted):
                self.shifted.emit(tab, event.n_discarded)
                self._dirty_info.add(tab)
            elif isinstance(event, Evicted):
                self._persist_evicted(engine, event.key, tab)
        self._flush_streams(force=False)
        self._emit_stats(force=False)

    def _flush_stream(self, tab: int, now: float) -> None:
        stream = self._streams.get(tab)
        if stream is None or not stream.text:
            return
        text = "".join(stream.text)
        signal = self.reasoning if stream.reasoning else self.tokens
        signal.emit(tab, text, stream.n_tokens, stream.first_at)
        stream.text.clear()
        stream.n_tokens = 0
        stream.last_emit = now

    def _flush_streams(self, force: bool) -> None:
        now = time.perf_counter()
        for tab, stream in self._streams.items():
            if stream.text and (force or now - stream.last_emit >= _EMIT_INTERVAL_S):
                self._flush_stream(tab, now)

    def _emit_stats(self, force: bool) -> None:
        now = time.perf_counter()
        if not force and now - self._last_stats < _STATS_INTERVAL_S:
            return
        self._last_stats = now
        engine = self._engine
        window = [(t, n) for t, n in self._gen_window if now - t <= 2.0]
        self._gen_window = window
        tok_s = 0.0
        if window:
            span = max(now - window[0][0], 0.25)
            tok_s = sum(n for _, n in window) / span
        busy = 0
        memory: dict[str, int] = {}
        if engine is not None and engine.context is not None:
            busy = sum(1 for key in self._tabs if engine.is_busy(key))
            memory = dict(engine.memory())
            for tab in list(self._dirty_info) + ([] if not force else list(self._keys)):
                self._emit_info(tab)
            self._dirty_info.clear()
        self.stats.emit({"tok_s": tok_s if busy else 0.0, "busy": busy, **memory})

    def _emit_info(self, tab: int, **extra: Any) -> None:
        engine = self._engine
        key = self._keys.get(tab)
        if engine is None or engine.context is None or key is None:
            return
        try:
            info = engine.info(key)
        except LlamaDeskError:
            return
        self.tabInfo.emit(
            tab,
            {
                "n_tokens": info.n_tokens,
                "n_ctx": info.n_ctx,
                "resident": info.resident,
                "busy": info.busy,
                "generating": info.generating,
                **extra,
            },
        )

    def _persist_evicted(self, engine: Engine, key: int, tab: int) -> None:
        """An evicted sequence's cache goes to its state file (it comes back from there)."""
        saved = False
        if self._store is not None:
            try:
                data = engine.parked_state(key)
                if data is not None:
                    saved = self._store.put(tab, engine.model_fingerprint, data) is not None
            except LlamaDeskError as exc:
                log.warning("could not save the state of tab %d: %s", tab, exc)
        self._emit_info(tab, saved=saved)

    # ---------------------------------------------------------------- commands

    def _do_call(self, func: Callable[[Engine | None], Any], reply: Callable[[Any], None]) -> None:
        reply(func(self._engine))

    def _do_load_model(self, path: str, settings: dict[str, Any], policy: str) -> None:
        try:
            # A broken file is refused before the loaded model is given up.
            read_model_info(path)
        except LlamaDeskError as exc:
            self.loadFailed.emit(path, str(exc))
            return
        tabs = list(self._keys)
        had_engine = self._engine is not None
        self._save_states()
        self._close_engine()
        if had_engine:
            self.modelUnloaded.emit()
        last = [0.0]

        def on_progress(fraction: float) -> bool:
            if self._load_cancel.is_set():
                return False
            now = time.perf_counter()
            if fraction >= 1.0 or now - last[0] > 0.05:
                last[0] = now
                self.loadProgress.emit(float(fraction))
            return True

        ctx_settings = ContextSettings.from_dict(settings)
        try:
            engine = Engine()
            try:
                engine.load_model(path, progress=on_progress)
                try:
                    engine.create_context(ctx_settings)
                except LlamaDeskError as exc:
                    # The saved settings do not suit this model: fall back to the defaults.
                    defaults = ContextSettings(
                        n_threads=ctx_settings.n_threads,
                        n_threads_batch=ctx_settings.n_threads_batch,
                    )
                    engine.create_context(defaults)
                    self.error.emit(f"{exc} LlamaDesk used the default context settings instead.")
            except BaseException:
                engine.close()
                raise
        except LlamaDeskError as exc:
            self.loadFailed.emit(path, str(exc))
            return
        except Exception as exc:
            log.exception("loading %s failed", path)
            self.loadFailed.emit(path, f"Could not load {path}: {exc}")
            return
        if policy in ("shift", "stop"):
            self._default_policy = policy
        engine.context_full_policy = self._default_policy
        self._engine = engine
        self.modelLoaded.emit(self._model_dict(engine))
        for tab in tabs:
            self._do_open_tab(tab)

    def _model_dict(self, engine: Engine) -> dict[str, Any]:
        info = engine.model_info
        model = engine.model
        assert model is not None
        settings = engine.settings
        memory = engine.memory()
        return {
            **info.to_dict(),
            "display_name": info.display_name,
            "params_label": info.params_label,
            "settings": settings.to_dict(),
            "fingerprint": engine.model_fingerprint,
            "model_bytes": model.size_bytes,
            "kv_bytes": memory["kv_bytes"],
            "n_ctx": memory["n_ctx"],  # what the context got (the settings may ask for more)
            "n_ctx_seq": engine.n_ctx_seq,
            # which reasoning choices change this model's prompt (the tab shows only those)
            "supports_thinking_toggle": bool(
                getattr(engine.template, "supports_thinking_toggle", False)
            ),
            "supports_effort": bool(getattr(engine.template, "supports_effort", False)),
        }

    def _do_unload_model(self) -> None:
        self._save_states()
        self._close_engine()
        self.modelUnloaded.emit()

    def _close_engine(self) -> None:
        engine, self._engine = self._engine, None
        self._keys.clear()
        self._tabs.clear()
        self._streams.clear()
        self._running_gen.clear()
        if engine is not None:
            engine.close()

    def _do_open_tab(self, tab: int) -> None:
        engine = self._engine
        if engine is None or engine.context is None or tab in self._keys:
            return
        key = engine.open_sequence()
        self._keys[tab] = key
        self._tabs[key] = tab
        self._apply_policy(tab)
        restored = False
        refusal: str | None = None
        if self._store is not None:
            data = self._store.get(tab, engine.model_fingerprint)
            if data is not None:
                try:
                    restored = engine.restore_state(key, data)
                    refusal = None if restored else engine.last_restore_error
                except LlamaDeskError as exc:
                    log.info("state of tab %d refused: %s", tab, exc)
                    restored, refusal = False, str(exc)
                if not restored:
                    # Refused (other settings, damaged...): the text is re-processed later.
                    log.info("state of tab %d not restored: %s", tab, refusal)
                    engine.clear_sequence(key)
                    refusal = refusal or "the saved cache could not be used."
        self._emit_info(tab, restored=restored, restore_error=refusal)

    def _do_close_tab(self, tab: int, save: bool) -> None:
        engine = self._engine
        key = self._keys.pop(tab, None)
        self._policies.pop(tab, None)
        if key is None or engine is None:
            return
        self._tabs.pop(key, None)
        self._streams.pop(tab, None)
        if engine.is_busy(key):
            engine.stop(key)
            while engine.is_busy(key):
                self._step(engine)
        if save:
            self._save_one(engine, tab, key)
        engine.close_sequence(key)

    def _do_submit(
        self,
        tab: int,
        gen: int,
        messages: list[dict[str, Any]],
        system: str,
        sampling: dict[str, Any],
    ) -> None:
        engine = self._engine
        with self._lock:
            cancelled = self._stop_gen.get(tab) == gen
        if engine is None or engine.context is None:
            self.failed.emit(tab, "No model is loaded. Load a model in the model manager first.")
            self.finished.emit(tab, completion_dict(Completion(finish_reason="error")))
            return
        if tab not in self._keys:
            self._do_open_tab(tab)
        key = self._keys[tab]
        if cancelled:
            self.finished.emit(tab, completion_dict(Completion(finish_reason="aborted")))
            return
        try:
            params = SamplingParams.from_dict(sampling)
            params.validate()
            reserve = params.max_tokens if params.max_tokens > 0 else None
            if _takes_reasoning(engine):
                n = engine.set_chat(
                    key,
                    messages,
                    system=system or None,
                    reserve=reserve,
                    reasoning=reasoning_options(sampling),
                )
            else:
                n = engine.set_chat(key, messages, system=system or None, reserve=reserve)
            engine.start(key, params)
        except LlamaDeskError as exc:
            self.failed.emit(tab, str(exc))
            self.finished.emit(
                tab, completion_dict(Completion(finish_reason="error", error=str(exc)))
            )
            return
        self._running_gen[tab] = gen
        self.started.emit(tab, n)
        self._dirty_info.add(tab)
        with self._lock:  # a stop that raced with the start
            if self._stop_gen.get(tab) == gen:
                engine.stop(key)

    def _do_fork(self, src: int, dst: int, messages: list[dict[str, Any]], system: str) -> None:
        engine = self._engine
        if engine is None or engine.context is None or dst in self._keys:
            return
        src_key = self._keys.get(src)
        key: int | None = None
        if src_key is not None and not engine.is_busy(src_key):
            msgs = list(messages)
            if system:
                msgs = [{"role": "system", "content": system}] + [
                    m for m in msgs if m.get("role") != "system"
                ]
            try:
                text = engine.render_chat(msgs, add_generation_prompt=False)
                wanted = engine.tokenize(text, add_special=True, parse_special=True)
                held = engine.tokens(src_key)
                n = 0
                for a, b in zip(wanted, held, strict=False):
                    if a != b:
                        break
                    n += 1
                key = engine.fork(src_key, n)
            except LlamaDeskError as exc:
                log.info("fork without the cache (%s)", exc)
                key = None
        if key is None:
            self._do_open_tab(dst)
            return
        self._keys[dst] = key
        self._tabs[key] = dst
        self._apply_policy(dst)
        self._emit_info(dst, forked=True)

    def _do_reconfigure(self, settings: dict[str, Any]) -> None:
        engine = self._engine
        if engine is None or engine.context is None:
            self.reconfigureFailed.emit("Load a model before changing the context settings.")
            return
        new = ContextSettings.from_dict(settings)
        self.busyMessage.emit("Saving the tabs' caches and rebuilding the context…")
        try:
            engine.reconfigure(new)
        except LlamaDeskError as exc:
            self.busyMessage.emit("")
            self.reconfigureFailed.emit(str(exc))
            return
        self.busyMessage.emit("")
        info = self._model_dict(engine)
        self.reconfigured.emit(info)
        for tab in self._keys:
            self._emit_info(tab)

    def _do_set_default_policy(self, policy: str) -> None:
        if policy in ("shift", "stop"):
            self._default_policy = policy
            if self._engine is not None:
                self._engine.context_full_policy = policy

    def _do_set_policy(self, tab: int, policy: str | None) -> None:
        if policy not in ("shift", "stop"):
            policy = None
        self._policies[tab] = policy
        self._apply_policy(tab)

    def _apply_policy(self, tab: int) -> None:
        engine = self._engine
        key = self._keys.get(tab)
        if engine is not None and key is not None:
            engine.set_policy(key, self._policies.get(tab))

    def _do_save_all(self) -> None:
        self._save_states()

    def _do_shutdown(self) -> None:
        engine = self._engine
        if engine is not None and engine.context is not None:
            engine.stop(None)
            deadline = time.perf_counter() + 1.0
            while engine.has_work() and time.perf_counter() < deadline:
                self._step(engine)
            self._flush_streams(force=True)
        self._save_states()
        self._close_engine()
        self._closed = True
        self.shutdownDone.emit()

    def _save_states(self) -> None:
        engine = self._engine
        if engine is None or engine.context is None or self._store is None:
            return
        for tab, key in list(self._keys.items()):
            if engine.is_busy(key):
                continue
            self._save_one(engine, tab, key)

    def _save_one(self, engine: Engine, tab: int, key: int) -> None:
        if self._store is None:
            return
        try:
            if not engine.tokens(key) and not engine.pending_tokens(key):
                return
            data = engine.save_state(key)
        except LlamaDeskError as exc:
            log.warning("could not save the state of tab %d: %s", tab, exc)
            return
        self._store.put(tab, engine.model_fingerprint, data)


class WorkerThread:
    """The worker and its QThread, started and stopped together."""

    def __init__(self, store: StateStore | None) -> None:
        # The worker's Python work between decodes holds the GIL; by default a thread
        # waiting for it (the GUI) may wait 5 ms per switch, which adds up to dropped
        # frames. 1 ms keeps the GUI's waits short at a negligible cost.
        sys.setswitchinterval(min(sys.getswitchinterval(), GIL_SWITCH_INTERVAL_S))
        self.thread = QThread()
        self.thread.setObjectName("engine")
        self.worker = EngineWorker(store)
        self.worker.moveToThread(self.thread)
        self.thread.start()

    def stop(self, timeout_ms: int = 2000) -> bool:
        """Quit the thread (after ``worker.shutdown()`` finished); True if it ended in time."""
        self.thread.quit()
        return bool(self.thread.wait(timeout_ms))
