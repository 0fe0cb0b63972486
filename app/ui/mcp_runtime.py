"""Where the window's MCP work runs: an asyncio loop, one long job of a pool of its own
("mcp", :class:`~app.ui.background.BackgroundJobs`, the window's one way to run work off
the GUI thread).

The ``mcp`` SDK is asynchronous (anyio) and a server may take seconds to start, hang or
die; none of it may hold the GUI thread, and the engine's thread is the session's. A pool
of one thread running blocking callables one after another would let one hung server hold
every other job: so MCP gets its own event loop, where a hung probe is just a task that
waits for its timeout while others go on. The loop runs as a job of the runtime's pool;
its coroutines' blocking calls (the config file, the keyring) run on the pool's other
threads (:meth:`McpRuntime.blocking`), not on the loop.

:meth:`McpRuntime.submit` schedules a coroutine and hands its result (or the exception)
to a callback on the GUI thread, through :class:`~app.ui.background.GuiRelay` (queued by
Qt, as :class:`~app.ui.worker.EngineWorker` does for the session).
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import logging
import threading
from collections.abc import Callable, Coroutine
from typing import Any, Final, TypeVar

from app.ui.background import BackgroundJobs, GuiRelay

__all__ = ["PROBE_TIMEOUT_S", "McpRuntime", "shared_runtime"]

log = logging.getLogger(__name__)

T = TypeVar("T")

# Test connection waits this long for a server to start and list its tools.
PROBE_TIMEOUT_S: Final = 15.0

# The loop's thread, and three for blocking calls (a keyring that waits for an unlock
# holds one; a config read still gets another).
_THREADS: Final = 4


class McpRuntime:
    """An asyncio loop on a pool thread; started on first use (make it on the GUI thread)."""

    def __init__(self) -> None:
        self._jobs = BackgroundJobs("mcp", threads=_THREADS)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._running = threading.Event()  # set while the loop's job runs
        self._lock = threading.Lock()
        self._relay = GuiRelay()
        self._exit_hook = False

    def loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None or not self._running.is_set():
                # The standard loop, not the policy's: under qasync the policy's loop is a
                # Qt event loop, which must not run off the GUI thread.
                loop = asyncio.DefaultEventLoopPolicy().new_event_loop()
                running = self._running = threading.Event()

                def run() -> None:  # on a pool thread, until stop()
                    loop.call_soon(running.set)
                    try:
                        loop.run_forever()
                    finally:
                        # Left open: a stdio child that ends later is still reaped by it.
                        running.clear()

                self._jobs.submit(run)
                running.wait()
                self._loop = loop
                if not self._exit_hook:
                    # A pool waits for its jobs when it goes at exit: the loop must end.
                    atexit.register(self.stop)
                    self._exit_hook = True
            return self._loop

    async def blocking(self, fn: Callable[[], T]) -> T:
        """Await ``fn()`` (files, keyring) on another thread of the runtime's pool."""
        return await self._jobs.call(fn)

    def run(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Schedule ``coro`` on the loop; a future of its result (any thread)."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop())

    def submit(
        self, coro: Coroutine[Any, Any, T], done: Callable[[T | BaseException], None]
    ) -> concurrent.futures.Future[T]:
        """Schedule ``coro``; ``done`` gets its result (or exception) on the GUI thread."""
        future = self.run(coro)
        relay = self._relay

        def forward(f: concurrent.futures.Future[T]) -> None:  # on the loop's thread
            if f.cancelled():
                result: object = concurrent.futures.CancelledError()
            else:
                error = f.exception()
                result = error if error is not None else f.result()
            relay.send(done, result)

        future.add_done_callback(forward)
        return future

    def stop(self, timeout_s: float = 5.0) -> None:
        """Cancel what runs (connections close, stdio children end) and end the loop."""
        with self._lock:
            loop, running = self._loop, self._running
            self._loop = None
        if loop is None or not running.is_set():
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
        self._jobs.wait_idle(timeout_s)


_shared: McpRuntime | None = None


def shared_runtime() -> McpRuntime:
    """The one runtime of the process (the preferences and the chat tabs share it); made on
    the GUI thread at first use."""
    global _shared
    if _shared is None:
        _shared = McpRuntime()
    return _shared
