"""Where the window's MCP work runs: an asyncio loop on a thread of its own ("mcp").

The ``mcp`` SDK is asynchronous (anyio) and a server may take seconds to start, hang or
die; none of it may hold the GUI thread, and the engine's thread is the session's. The
window's jobs pool runs blocking callables one after another, which would let one hung
server hold every other job: so MCP gets its own event loop, where a hung probe is just
a task that waits for its timeout while others go on.

:meth:`McpRuntime.submit` schedules a coroutine and hands its result (or the exception)
to a callback on the GUI thread, through :class:`_Relay`, a QObject living there (queued
by Qt, as :class:`~app.ui.worker.EngineWorker` does for the session).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from collections.abc import Callable, Coroutine
from typing import Any, Final, TypeVar

from PySide6.QtCore import QObject, Signal, Slot

__all__ = ["PROBE_TIMEOUT_S", "McpRuntime", "shared_runtime"]

log = logging.getLogger(__name__)

T = TypeVar("T")

# Test connection waits this long for a server to start and list its tools.
PROBE_TIMEOUT_S: Final = 15.0


class _Relay(QObject):
    """Lives on the GUI thread: results cross to it queued."""

    delivered = Signal(object, object)  # (callback, result or exception)

    @Slot(object, object)
    def _deliver(self, done: Callable[[Any], None], result: object) -> None:
        try:
            done(result)
        except RuntimeError as exc:  # the widget the callback touches is gone
            log.debug("MCP result for a closed widget: %s", exc)


class McpRuntime:
    """An asyncio loop on a daemon thread; started on first use."""

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._relay = _Relay()
        self._relay.delivered.connect(self._relay._deliver)

    def loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None or self._thread is None or not self._thread.is_alive():
                # The standard loop, not the policy's: under qasync the policy's loop is a
                # Qt event loop, which must not run off the GUI thread.
                loop = asyncio.DefaultEventLoopPolicy().new_event_loop()
                ready = threading.Event()

                def run() -> None:
                    loop.call_soon(ready.set)
                    loop.run_forever()

                thread = threading.Thread(target=run, name="mcp", daemon=True)
                thread.start()
                ready.wait()
                self._loop, self._thread = loop, thread
            return self._loop

    def run(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Schedule ``coro`` on the loop; a future of its result (any thread)."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop())

    def submit(
        self, coro: Coroutine[Any, Any, T], done: Callable[[T | BaseException], None]
    ) -> concurrent.futures.Future[T]:
        """Schedule ``coro``; ``done`` gets its result (or exception) on the GUI thread."""
        future = self.run(coro)
        relay = self._relay

        def forward(f: concurrent.futures.Future[T]) -> None:  # on the mcp thread
            if f.cancelled():
                result: object = concurrent.futures.CancelledError()
            else:
                error = f.exception()
                result = error if error is not None else f.result()
            try:
                relay.delivered.emit(done, result)
            except RuntimeError:  # the application is gone
                pass

        future.add_done_callback(forward)
        return future

    def stop(self, timeout_s: float = 5.0) -> None:
        """Cancel what runs (connections close, stdio children end) and end the thread."""
        with self._lock:
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None
        if loop is None or thread is None:
            return

        async def cancel_all() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.wait(tasks, timeout=timeout_s) if tasks else None

        try:
            asyncio.run_coroutine_threadsafe(cancel_all(), loop).result(timeout_s + 1)
        except Exception as exc:
            log.info("MCP tasks did not all end: %s", exc)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout_s)


_shared: McpRuntime | None = None


def shared_runtime() -> McpRuntime:
    """The one runtime of the process (the preferences and the chat tabs share it); made on
    the GUI thread at first use."""
    global _shared
    if _shared is None:
        _shared = McpRuntime()
    return _shared
