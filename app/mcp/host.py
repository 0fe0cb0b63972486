"""The host side of a tool round: the MCP tools as the model sees them (OpenAI ``tools``),
and the model's calls run through the loop guard, the approval and the connections, each
giving the ``role: "tool"`` message the model reads next.

A tool's name is what the model calls it by: the MCP name when only one connected server
has a tool of that name, else ``server__tool`` (OpenAI names allow ``[A-Za-z0-9_-]``, 64 at
most), so two servers' tools never shadow each other.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import anyio

from app.mcp.approval import ApprovalPolicy, ApprovalRequest, Decision, denied_result
from app.mcp.client import (
    DEFAULT_CALL_TIMEOUT,
    DEFAULT_MAX_RESULT_CHARS,
    CallOutcome,
    McpManager,
    McpTool,
    ToolResult,
    bounded_result,
)
from app.mcp.loop_guard import LoopGuard, PlannedCall

__all__ = ["ModelCall", "RoundResult", "ToolHost", "ToolMessage"]

_UNSAFE: Final = re.compile(r"[^A-Za-z0-9_-]")
_MAX_NAME: Final = 64


@dataclass(frozen=True, slots=True)
class ModelCall:
    """A call the model made (from the parser's :class:`ToolCall`)."""

    call_id: str
    name: str
    arguments: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class ToolMessage:
    """The answer to one call: ``content`` is the ``role: "tool"`` message's text."""

    call_id: str
    name: str
    server: str
    result: ToolResult

    @property
    def content(self) -> str:
        return self.result.text


@dataclass(frozen=True, slots=True)
class RoundResult:
    messages: tuple[ToolMessage, ...]
    stopped: str | None = None  # the loop guard's sentence: no more rounds this turn


def _exposed(server: str, tool: str, clash: bool) -> str:
    name = f"{server}__{tool}" if clash else tool
    return _UNSAFE.sub("_", name)[:_MAX_NAME]


class ToolHost:
    """The tools of the connected servers that are switched on (``enabled``: pairs of
    server and tool; None: all)."""

    def __init__(
        self,
        manager: McpManager,
        policy: ApprovalPolicy,
        enabled: set[tuple[str, str]] | None = None,
        timeout: float = DEFAULT_CALL_TIMEOUT,
        max_result_chars: int = DEFAULT_MAX_RESULT_CHARS,
    ) -> None:
        self._manager = manager
        self._policy = policy
        self._timeout = timeout
        self._max_result_chars = max_result_chars
        tools = [
            t
            for s in manager.statuses
            for t in s.tools
            if enabled is None or (t.server, t.name) in enabled
        ]
        counts: dict[str, int] = {}
        for tool in tools:
            counts[tool.name] = counts.get(tool.name, 0) + 1
        self._by_name: dict[str, McpTool] = {
            _exposed(t.server, t.name, counts[t.name] > 1): t for t in tools
        }

    def openai_tools(self) -> list[dict[str, Any]]:
        """The ``tools`` of a chat request (each tool's schema as its server gave it)."""
        return [
            {
                "type": "function",
                "function": {
                    "name": name,
                    "description": t.description,
                    "parameters": dict(t.input_schema),
                },
            }
            for name, t in self._by_name.items()
        ]

    def tool(self, name: str) -> McpTool | None:
        return self._by_name.get(name)

    async def run_round(
        self,
        calls: Sequence[ModelCall],
        ask: Callable[[ApprovalRequest], Awaitable[Decision]],
        guard: LoopGuard,
        cancel: anyio.Event | None = None,
    ) -> RoundResult:
        """Run the model's calls of one round, in order, each asked about first."""
        known = [c for c in calls if c.name in self._by_name]
        stop = guard.check([PlannedCall(c.name, c.arguments) for c in known])
        messages = []
        for call in calls:
            tool = self._by_name.get(call.name)
            if tool is None:
                text = f"There is no tool named '{call.name}'."
                result = ToolResult(CallOutcome.UNKNOWN_TOOL, "Error: " + text, text)
                messages.append(ToolMessage(call.call_id, call.name, "", result))
                continue
            if stop is not None:
                result = ToolResult(CallOutcome.LOOP_STOPPED, "Error: " + stop, stop)
            elif cancel is not None and cancel.is_set():
                text = f"The call of the tool '{tool.name}' was stopped before it ran."
                result = ToolResult(CallOutcome.CANCELLED, "Error: " + text, text)
            else:
                result = bounded_result(
                    await self._run(tool, call, ask, cancel), self._max_result_chars
                )
            messages.append(ToolMessage(call.call_id, call.name, tool.server, result))
        return RoundResult(tuple(messages), stop)

    async def _run(
        self,
        tool: McpTool,
        call: ModelCall,
        ask: Callable[[ApprovalRequest], Awaitable[Decision]],
        cancel: anyio.Event | None,
    ) -> ToolResult:
        connection = self._manager.connection(tool.server)
        if connection is None:  # the host was built from this manager's statuses
            raise LookupError(tool.server)
        if not await self._policy.authorize(connection.server, tool.name, call.arguments, ask):
            return denied_result(tool.server, tool.name)
        return await connection.call(tool.name, call.arguments, self._timeout, cancel)
