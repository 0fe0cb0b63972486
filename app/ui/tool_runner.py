"""The window's MCP servers while chats use them: connected once on the MCP loop
(:mod:`app.ui.mcp_runtime`) and kept open, and the model's calls of a round run through
:class:`~app.mcp.host.ToolHost` (loop guard, approval, per-call timeout) there.

A round can be stopped (:meth:`RoundHandle.cancel`, the tab's Stop or its closing): a
call waiting for approval is denied and its dialog closes, a running call is cancelled
(the server is told), the calls not yet run are not run. Results come back on the GUI
thread, one :class:`~app.mcp.host.RoundResult` per round, with a sentence for anything that
went wrong (a server that died, a timeout), never an exception.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

import anyio

from app.mcp.approval import ApprovalPolicy, ApprovalRequest, Decision
from app.mcp.client import DEFAULT_CALL_TIMEOUT, McpManager, McpTool, ServerStatus
from app.mcp.config import McpConfig
from app.mcp.host import ModelCall, RoundResult, ToolHost
from app.mcp.loop_guard import LoopGuard
from app.ui.mcp_runtime import McpRuntime
from app.ui.mcp_store import McpStore

__all__ = ["Connected", "RoundHandle", "ToolRunner"]

log = logging.getLogger(__name__)

Ask = Callable[[ApprovalRequest], Awaitable[Decision]]


@dataclass(frozen=True, slots=True)
class Connected:
    """What connecting gave: each enabled server's status, and sentences for the
    servers left out (a secret missing) or a configuration that cannot be read."""

    statuses: tuple[ServerStatus, ...]
    problems: tuple[str, ...] = ()

    def tools(self) -> list[McpTool]:
        return [t for s in self.statuses for t in s.tools]


@dataclass(slots=True, weakref_slot=True)  # Qt connects its cancel to a tab's destroyed
class RoundHandle:
    """A round under way; :meth:`cancel` stops it (from the GUI thread)."""

    _loop: asyncio.AbstractEventLoop
    _event: list[anyio.Event] = field(default_factory=list)  # set on the loop once it runs
    _cancelled: bool = False

    def cancel(self) -> None:
        self._cancelled = True

        def set_all() -> None:
            for event in self._event:
                event.set()

        if not self._loop.is_closed():
            self._loop.call_soon_threadsafe(set_all)

    @property
    def cancelled(self) -> bool:
        return self._cancelled


class ToolRunner:
    """See the module docstring; one per window."""

    def __init__(
        self,
        runtime: McpRuntime,
        store: McpStore | None = None,
        policy: ApprovalPolicy | None = None,
        timeout_s: float = DEFAULT_CALL_TIMEOUT,
    ) -> None:
        self.runtime = runtime
        self.store = store or McpStore()
        self._policy = policy
        self.timeout_s = timeout_s
        self.connected: Connected | None = None  # the last connect's answer (GUI thread)
        self._manager: McpManager | None = None  # on the MCP thread
        self._closing: asyncio.Event | None = None
        self._holder: asyncio.Task[None] | None = None
        self._connected_mtime: float | None = None  # the mcp.json the connections follow
        self._waiting: list[Callable[[Connected], None]] | None = None  # a connect under way

    def _config_mtime(self) -> float:
        try:
            return self.store.path.stat().st_mtime
        except OSError:
            return 0.0

    def up_to_date(self) -> bool:
        """Connected, and to the servers the file lists now (Preferences may change it)."""
        return self.connected is not None and self._connected_mtime == self._config_mtime()

    # -- connecting -----------------------------------------------------------------------

    def connect(self, done: Callable[[Connected], None]) -> None:
        """(Re)connect the enabled servers of the store; ``done`` on the GUI thread. While a
        connect is under way, another waits for it (tabs share the connections)."""
        if self._waiting is not None:
            self._waiting.append(done)
            return
        self._waiting = [done]

        def finished(result: object) -> None:
            if isinstance(result, BaseException):
                log.error("connecting the MCP servers failed", exc_info=result)
                result = Connected((), (f"The MCP servers could not be connected: {result}.",))
            assert isinstance(result, Connected)
            self.connected = result
            self._connected_mtime = mtime
            waiting, self._waiting = self._waiting or [], None
            for callback in waiting:
                callback(result)

        mtime = self._config_mtime()
        self.runtime.submit(self._connect(), finished)

    async def _connect(self) -> Connected:
        await self._release()
        try:
            config, problems = await self.runtime.blocking(self.store.config)
        except Exception as exc:  # an unreadable mcp.json: a sentence, no servers
            return Connected((), (str(exc),))
        if self._policy is None:
            self._policy = await self.runtime.blocking(ApprovalPolicy)
        if self._policy.problem:
            problems.append(self._policy.problem)
        ready: asyncio.Future[McpManager] = asyncio.get_running_loop().create_future()
        self._closing = asyncio.Event()
        self._holder = asyncio.ensure_future(self._hold(config, ready, self._closing))
        self._manager = await ready
        return Connected(self._manager.statuses, tuple(problems))

    async def _hold(
        self, config: McpConfig, ready: asyncio.Future[McpManager], closing: asyncio.Event
    ) -> None:
        # The SDK's transports must be left in the task that entered them: this one.
        try:
            async with McpManager(config) as manager:
                ready.set_result(manager)
                await closing.wait()
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(exc)
            if not isinstance(exc, asyncio.CancelledError):
                log.info("MCP connections ended: %s", exc)
            raise

    async def _release(self) -> None:
        closing, holder = self._closing, self._holder
        self._manager = self._closing = self._holder = None
        if closing is not None:
            closing.set()
        if holder is not None:
            try:
                await asyncio.wait_for(holder, 10)
            except (Exception, asyncio.CancelledError) as exc:
                log.info("closing the MCP connections: %s", exc)

    def close(self) -> None:
        """Close the connections (stdio servers end); returns at once."""
        self.connected = None
        self._connected_mtime = None
        self.runtime.run(self._release())

    # -- rounds ---------------------------------------------------------------------------

    def run_round(
        self,
        calls: Sequence[ModelCall],
        enabled: set[tuple[str, str]] | None,
        ask: Ask,
        guard: LoopGuard,
        done: Callable[[RoundResult], None],
    ) -> RoundHandle:
        """Run the model's ``calls`` (only tools in ``enabled`` exist for it); ``done``
        gets the result on the GUI thread."""
        handle = RoundHandle(self.runtime.loop())

        def finished(result: object) -> None:
            if isinstance(result, concurrent.futures.CancelledError):  # the app is closing
                result = RoundResult((), "The tool calls were stopped.")
            elif isinstance(result, BaseException):
                log.error("a tool round failed", exc_info=result)
                result = RoundResult((), f"The tools could not be run: {result}.")
            assert isinstance(result, RoundResult)
            done(result)

        self.runtime.submit(self._round(list(calls), enabled, ask, guard, handle), finished)
        return handle

    async def _round(
        self,
        calls: list[ModelCall],
        enabled: set[tuple[str, str]] | None,
        ask: Ask,
        guard: LoopGuard,
        handle: RoundHandle,
    ) -> RoundResult:
        cancel = anyio.Event()
        handle._event.append(cancel)
        if handle.cancelled:
            cancel.set()
        manager = self._manager
        if manager is None:
            return RoundResult((), "The MCP servers are not connected.")
        assert self._policy is not None
        host = ToolHost(manager, self._policy, enabled, self.timeout_s)

        async def ask_or_stop(request: ApprovalRequest) -> Decision:
            """The user's answer, or Deny when the round is stopped meanwhile."""
            asking = asyncio.ensure_future(ask(request))
            stopping = asyncio.ensure_future(cancel.wait())
            await asyncio.wait({asking, stopping}, return_when=asyncio.FIRST_COMPLETED)
            if asking.done():
                stopping.cancel()
                return asking.result()
            asking.cancel()  # closes the dialog
            return Decision.DENY

        return await host.run_round(calls, ask_or_stop, guard, cancel)

    def openai_tools(self, enabled: set[tuple[str, str]] | None) -> list[dict[str, object]]:
        """The ``tools`` the model is given: the connected tools in ``enabled``, named as
        the host names them (see :mod:`app.mcp.host`)."""
        manager, policy = self._manager, self._policy
        if manager is None or policy is None:
            return []
        return ToolHost(manager, policy, enabled, self.timeout_s).openai_tools()

    def tool_for(self, name: str, enabled: set[tuple[str, str]] | None) -> McpTool | None:
        """The tool the model calls ``name`` (as :meth:`openai_tools` named it)."""
        manager, policy = self._manager, self._policy
        if manager is None or policy is None:
            return None
        return ToolHost(manager, policy, enabled, self.timeout_s).tool(name)

    def tools(self, enabled: set[tuple[str, str]] | None = None) -> list[McpTool]:
        """The connected tools (those in ``enabled``)."""
        if self.connected is None:
            return []
        return [
            t for t in self.connected.tools() if enabled is None or (t.server, t.name) in enabled
        ]
