"""Connections to MCP servers (the ``mcp`` SDK 2.x): start stdio servers and reach
Streamable HTTP ones, list their tools, call a tool with a timeout and a way to stop it.

Nothing here raises for what a server does: a server that will not start, crashes, hangs
or answers with an error becomes a typed result with a sentence (:class:`ToolResult`,
:class:`ServerStatus`), so the model can be told and the user shown, and nothing else of
the conversation is lost.

The stdio child gets only the environment it is configured with, plus a minimal PATH:
on POSIX it is started through ``env -i`` (the SDK would pass HOME, USER, SHELL ... on).
"""

from __future__ import annotations

import contextlib
import enum
import json
import os
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Final, TextIO, cast

import anyio
import anyio.abc
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from app.mcp.config import (
    HttpServer,
    McpConfig,
    ServerConfig,
    StdioServer,
    insecure_http_refusal,
)
from app.mcp.stdio_transport import bounded_stdio_client

__all__ = [
    "DEFAULT_CALL_TIMEOUT",
    "CallOutcome",
    "McpConnection",
    "McpManager",
    "McpTool",
    "ServerStatus",
    "ToolResult",
    "bounded_result",
    "child_environment",
]

DEFAULT_CALL_TIMEOUT: Final = 30.0
DEFAULT_START_TIMEOUT: Final = 20.0
# What the model reads of one result at most (about 4,000 tokens): more fills a small
# context with one answer, and a huge one (megabytes) took the run down with it.
DEFAULT_MAX_RESULT_CHARS: Final = 16_000
MINIMAL_PATH: Final = (
    os.pathsep.join(("/usr/local/bin", "/usr/bin", "/bin")) if os.name != "nt" else ""
)
_STDERR_TAIL: Final = 300


class CallOutcome(enum.Enum):
    OK = "ok"
    TOOL_ERROR = "tool_error"  # the tool ran and reported an error
    TIMEOUT = "timeout"
    CANCELLED = "cancelled"
    SERVER_FAILED = "server_failed"  # not connected, crashed, or the connection broke
    UNKNOWN_TOOL = "unknown_tool"
    DENIED = "denied"  # the user said no (see app.mcp.approval)
    LOOP_STOPPED = "loop_stopped"  # not run: the turn's tool rounds stop (app.mcp.loop_guard)


@dataclass(frozen=True, slots=True)
class ToolResult:
    """What a call gave: ``text`` goes to the model as the tool's result; ``sentence``
    (empty when all went well) tells the user what went wrong."""

    outcome: CallOutcome
    text: str
    sentence: str = ""

    @property
    def ok(self) -> bool:
        return self.outcome is CallOutcome.OK


def bounded_result(result: ToolResult, max_chars: int) -> ToolResult:
    """``result`` with its text cut to ``max_chars`` characters and a note that tells the
    model (and the user) it was cut, and by how much."""
    text = result.text
    if len(text) <= max_chars:
        return result
    note = (
        f"\n[The tool's result was cut here: {max_chars:,} of its {len(text):,} characters "
        "are shown.]"
    )
    return replace(result, text=text[:max_chars] + note)


@dataclass(frozen=True, slots=True)
class McpTool:
    server: str
    name: str
    description: str
    input_schema: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class ServerStatus:
    name: str
    connected: bool
    tools: tuple[McpTool, ...] = ()
    sentence: str = ""  # why it is not connected


def child_environment(server: StdioServer) -> dict[str, str]:
    """The whole environment of a stdio server's process."""
    return {"PATH": MINIMAL_PATH, **server.env} if MINIMAL_PATH else dict(server.env)


def _describe(exc: BaseException) -> str:
    """The innermost message of an exception (task groups wrap the real one)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = str(exc).strip() or type(exc).__name__
    return text.rstrip(".")


def _content_text(content: list[Any]) -> str:
    parts = []
    for block in content:
        text = getattr(block, "text", None)
        parts.append(
            text
            if isinstance(text, str)
            else json.dumps(block.model_dump(mode="json", exclude_none=True))
        )
    return "\n".join(parts)


class McpConnection:
    """One server, connected while inside ``async with``."""

    def __init__(self, server: ServerConfig, start_timeout: float = DEFAULT_START_TIMEOUT) -> None:
        self.server = server
        self._start_timeout = start_timeout
        self._stack = contextlib.AsyncExitStack()
        self._group: anyio.abc.TaskGroup | None = None
        self._closing: anyio.Event | None = None  # made in serve (it needs the event loop)
        self._close_asked = False
        self._session: ClientSession | None = None
        self._stderr: TextIO | None = None
        self._broken = ""
        self._mark = 0
        self.status = ServerStatus(server.name, False, sentence="not started")

    def _stdio_params(self, server: StdioServer) -> StdioServerParameters:
        env = child_environment(server)
        command = shutil.which(server.command, path=os.environ.get("PATH")) or server.command
        if not os.path.exists(command):
            raise FileNotFoundError(f"the command '{server.command}' was not found")
        if os.name == "nt":
            return StdioServerParameters(
                command=command, args=list(server.args), env=env, cwd=server.cwd
            )
        wrapper = shutil.which("env") or "/usr/bin/env"
        args = ["-i", *(f"{k}={v}" for k, v in env.items()), command, *server.args]
        return StdioServerParameters(command=wrapper, args=args, cwd=server.cwd)

    def _stderr_mark(self) -> None:
        """Later failures quote only what the server writes from now on."""
        with contextlib.suppress(OSError, ValueError):
            if self._stderr is not None:
                self._stderr.seek(0, os.SEEK_END)
                self._mark = self._stderr.tell()

    def _stderr_tail(self) -> str:
        """The last line the server wrote to stderr since the mark."""
        if self._stderr is None:
            return ""
        with contextlib.suppress(OSError, ValueError):
            self._stderr.flush()
            self._stderr.seek(self._mark)
            lines = [line.strip() for line in self._stderr.read().splitlines() if line.strip()]
            return lines[-1][-_STDERR_TAIL:] if lines else ""
        return ""

    def _failure(self, what: str, exc: BaseException | None = None) -> str:
        detail = _describe(exc) if exc is not None else ""
        tail = self._stderr_tail()
        said = f" It said: {tail}" if tail and tail not in detail else ""
        because = f" ({detail})" if detail else ""
        return f"The MCP server '{self.server.name}' {what}{because}.{said}"

    async def __aenter__(self) -> McpConnection:
        self._group = anyio.create_task_group()
        await self._group.__aenter__()
        await self._group.start(self.serve)
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()
        group, self._group = self._group, None
        if group is not None:
            await group.__aexit__(None, None, None)

    def close(self) -> None:
        """Let :meth:`serve` disconnect (it returns once the server is closed)."""
        self._close_asked = True
        if self._closing is not None:
            self._closing.set()

    async def serve(self, task_status: Any = anyio.TASK_STATUS_IGNORED) -> None:
        """Connect, say so through ``task_status`` (also when it failed: :attr:`status`
        holds the sentence), stay connected until :meth:`close`, then disconnect.

        The whole connection lives in this one task: the SDK's transports hold task
        groups, which must be left in the task that entered them, and a transport that
        fails (an HTTP server that is down) cancels that task. Here that cancellation ends
        this connection only, with a sentence, instead of reaching the caller (a
        traceback, or a hang with other servers still open)."""
        refusal = insecure_http_refusal(self.server)
        if refusal is not None:  # nothing is sent: not even the handshake with its headers
            self.status = ServerStatus(self.server.name, False, sentence=refusal)
            task_status.started()
            return
        started = False
        self._closing = anyio.Event()
        if self._close_asked:
            self._closing.set()
        try:
            async with contextlib.AsyncExitStack() as stack:
                self._stack = stack
                # The transports' task groups stay open past the handshake: they are
                # entered outside the timeout's cancel scope, which only bounds it.
                session = await self._open()
                with anyio.fail_after(self._start_timeout):
                    await session.initialize()
                    listed = await session.list_tools()
                self._session = session
                tools = tuple(
                    McpTool(self.server.name, t.name, t.description or "", dict(t.input_schema))
                    for t in listed.tools
                )
                self.status = ServerStatus(self.server.name, True, tools)
                task_status.started()
                started = True
                await self._closing.wait()
                self._session = None
        except Exception as exc:
            inner: BaseException = exc
            while isinstance(inner, BaseExceptionGroup) and inner.exceptions:
                inner = inner.exceptions[0]  # the transports' task groups wrap it
            if isinstance(inner, TimeoutError) and not started:
                self._fail(f"did not answer within {self._start_timeout:g} s", None, started)
                return
            self._fail("stopped working" if started else "could not be started", exc, started)
        finally:
            self._session = None
            if self._stderr is not None:
                self._stderr.close()
                self._stderr = None
            if not started:
                task_status.started()

    def _fail(self, what: str, exc: BaseException | None, started: bool) -> None:
        sentence = self._failure(what, exc)
        if started:
            self._broken = self._broken or sentence
        else:
            self.status = ServerStatus(self.server.name, False, sentence=sentence)

    async def _open(self) -> ClientSession:
        server = self.server
        stack = self._stack
        if isinstance(server, StdioServer):
            # (closed by serve after the transport, so that a failure can quote it)
            self._stderr = self._stderr or cast(
                TextIO, tempfile.TemporaryFile("w+", encoding="utf-8")
            )
            streams = await stack.enter_async_context(
                bounded_stdio_client(self._stdio_params(server), self._stderr)
            )
        else:
            assert isinstance(server, HttpServer)
            client = await stack.enter_async_context(
                create_mcp_http_client(headers=dict(server.headers))
            )
            streams = await stack.enter_async_context(
                streamable_http_client(server.url, http_client=client)
            )
        return await stack.enter_async_context(ClientSession(streams[0], streams[1]))

    async def call(
        self,
        tool: str,
        arguments: Mapping[str, Any],
        timeout: float = DEFAULT_CALL_TIMEOUT,
        cancel: anyio.Event | None = None,
    ) -> ToolResult:
        """Call ``tool``; ``cancel`` set while it runs stops waiting for it (the server is
        told the request was cancelled)."""
        name = f"'{tool}' on the MCP server '{self.server.name}'"
        session = self._session
        if session is None:
            why = self._broken or self.status.sentence or "is not connected"
            return ToolResult(
                CallOutcome.SERVER_FAILED, f"Error: the tool {name} is unavailable.", why
            )
        if tool not in {t.name for t in self.status.tools}:
            text = f"Error: there is no tool '{tool}' on the MCP server '{self.server.name}'."
            return ToolResult(CallOutcome.UNKNOWN_TOOL, text, text[7:])
        outcome: list[ToolResult] = []
        self._stderr_mark()

        async def run(scope: anyio.CancelScope) -> None:
            try:
                with anyio.fail_after(timeout):
                    result = await session.call_tool(tool, dict(arguments))
            except TimeoutError:
                text = f"The tool {name} did not finish within {timeout:g} s and was stopped."
                outcome.append(ToolResult(CallOutcome.TIMEOUT, "Error: " + text, text))
            except Exception as exc:
                self._broken = self._failure("stopped working", exc)
                self._session = None
                outcome.append(
                    ToolResult(
                        CallOutcome.SERVER_FAILED, f"Error: the tool {name} failed.", self._broken
                    )
                )
            else:
                text = _content_text(list(getattr(result, "content", [])))
                if getattr(result, "is_error", False):
                    outcome.append(
                        ToolResult(
                            CallOutcome.TOOL_ERROR,
                            text,
                            f"The tool {name} reported an error: {text}",
                        )
                    )
                else:
                    outcome.append(ToolResult(CallOutcome.OK, text))
            scope.cancel()

        async def watch(scope: anyio.CancelScope, event: anyio.Event) -> None:
            await event.wait()
            text = f"The call of the tool {name} was stopped."
            outcome.append(ToolResult(CallOutcome.CANCELLED, "Error: " + text, text))
            scope.cancel()

        async with anyio.create_task_group() as group:
            group.start_soon(run, group.cancel_scope)
            if cancel is not None:
                group.start_soon(watch, group.cancel_scope, cancel)
        return outcome[0]


class McpManager:
    """The configured servers, each connected (or failed, with a sentence) inside
    ``async with``; calls go to the server by name."""

    def __init__(self, config: McpConfig, start_timeout: float = DEFAULT_START_TIMEOUT) -> None:
        self._connections = {s.name: McpConnection(s, start_timeout) for s in config.servers}
        self._group: anyio.abc.TaskGroup | None = None

    async def __aenter__(self) -> McpManager:
        # All at once, each bounded by the start timeout and failing alone (a server that
        # is down neither waits for nor stops the others).
        self._group = anyio.create_task_group()
        await self._group.__aenter__()
        try:
            async with anyio.create_task_group() as starting:
                for connection in self._connections.values():
                    starting.start_soon(self._group.start, connection.serve)
        except BaseException:
            await self.__aexit__(None, None, None)
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        for connection in self._connections.values():
            connection.close()
        group, self._group = self._group, None
        if group is not None:
            await group.__aexit__(None, None, None)

    @property
    def statuses(self) -> tuple[ServerStatus, ...]:
        return tuple(c.status for c in self._connections.values())

    def connection(self, server: str) -> McpConnection | None:
        return self._connections.get(server)

    async def call(
        self,
        server: str,
        tool: str,
        arguments: Mapping[str, Any],
        timeout: float = DEFAULT_CALL_TIMEOUT,
        cancel: anyio.Event | None = None,
    ) -> ToolResult:
        connection = self._connections.get(server)
        if connection is None:
            text = f"Error: there is no MCP server '{server}'."
            return ToolResult(CallOutcome.UNKNOWN_TOOL, text, text[7:])
        return await connection.call(tool, arguments, timeout, cancel)
