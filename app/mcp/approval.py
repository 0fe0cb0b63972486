"""Asking before a tool runs: Allow once, Always allow this tool on this server, or Deny.

"Always" is remembered in ``tool-permissions.json`` in the data folder, bound to the
server's command line (stdio) or URL (HTTP): a server whose command or URL changes is a
different program, so its permissions are gone. A denied call gives the model an error
result, so it can answer without the tool.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from app import paths
from app.fsutil import atomic_write_bytes
from app.mcp.client import CallOutcome, ToolResult
from app.mcp.config import ServerConfig

__all__ = [
    "ApprovalPolicy",
    "ApprovalRequest",
    "Decision",
    "denied_result",
    "permissions_path",
]

_VERSION: Final = 1


class Decision(enum.Enum):
    ALLOW_ONCE = "allow_once"
    ALWAYS = "always"  # allow this tool on this server from now on
    DENY = "deny"


@dataclass(frozen=True, slots=True)
class ApprovalRequest:
    """What the user is asked about: the server (and what it runs), the tool and the full
    arguments, pretty-printed."""

    server: str
    binding: str
    tool: str
    arguments: Mapping[str, Any]

    @property
    def arguments_text(self) -> str:
        return json.dumps(dict(self.arguments), indent=2, ensure_ascii=False, sort_keys=True)


def permissions_path() -> Path:
    return paths.data_dir() / "tool-permissions.json"


def denied_result(server: str, tool: str) -> ToolResult:
    text = f"The user did not allow the tool '{tool}' on the MCP server '{server}' to run."
    return ToolResult(CallOutcome.DENIED, "Error: " + text, text)


@dataclass(frozen=True, slots=True, order=True)
class _Grant:
    server: str
    binding: str
    tool: str


class ApprovalPolicy:
    """The remembered permissions (read once, written on each change)."""

    def __init__(self, path: Path | None = None) -> None:
        self._path = path or permissions_path()
        self.problem = ""  # why the file could not be read (none of it is then in effect)
        self._grants = self._read()

    def _read(self) -> set[_Grant]:
        try:
            data = json.loads(self._path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return set()
        except (OSError, ValueError) as exc:
            self.problem = f"The tool permissions in {self._path} could not be read ({exc}); none are in effect."
            return set()
        grants = set()
        for item in data.get("always", []) if isinstance(data, dict) else []:
            if isinstance(item, dict) and all(
                isinstance(item.get(k), str) for k in ("server", "binding", "tool")
            ):
                grants.add(_Grant(item["server"], item["binding"], item["tool"]))
        return grants

    def _write(self) -> None:
        items = [
            {"server": g.server, "binding": g.binding, "tool": g.tool} for g in sorted(self._grants)
        ]
        text = json.dumps({"version": _VERSION, "always": items}, indent=2)
        # Owner-only and replaced whole: it names servers' command lines, tokens included.
        atomic_write_bytes(self._path, text.encode("utf-8"))

    def is_allowed(self, server: ServerConfig, tool: str) -> bool:
        return _Grant(server.name, server.binding, tool) in self._grants

    def allow_always(self, server: ServerConfig, tool: str) -> None:
        self._grants.add(_Grant(server.name, server.binding, tool))
        self._write()

    def revoke(self, server: ServerConfig, tool: str) -> None:
        self._grants.discard(_Grant(server.name, server.binding, tool))
        self._write()

    async def authorize(
        self,
        server: ServerConfig,
        tool: str,
        arguments: Mapping[str, Any],
        ask: Callable[[ApprovalRequest], Awaitable[Decision]],
    ) -> bool:
        """Whether the call may run: remembered, else asked (an "always" answer is kept)."""
        if self.is_allowed(server, tool):
            return True
        decision = await ask(ApprovalRequest(server.name, server.binding, tool, arguments))
        if decision is Decision.ALWAYS:
            self.allow_always(server, tool)
        return decision is not Decision.DENY
