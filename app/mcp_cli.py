"""``llamadesk mcp list``: the configured MCP servers and their tools.

Each server is connected (stdio servers are started) and asked for its tools; a server
that cannot be reached is listed with the sentence why, and the exit code is 1.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

__all__ = ["register"]


def register(sub: Any) -> None:
    mcp = sub.add_parser(
        "mcp", help="MCP servers: list them and their tools", description="MCP servers."
    )
    commands = mcp.add_subparsers(dest="mcp_command", metavar="COMMAND", required=True)
    p = commands.add_parser(
        "list",
        help="list the MCP servers and their tools",
        description="Connect to each MCP server of the configuration (an mcp.json with "
        "'mcpServers', as LM Studio, Cursor and Claude write it) and list its tools.",
    )
    p.add_argument(
        "--config", type=Path, metavar="FILE", help="the mcp.json (default: the app's own)"
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument(
        "--allow-insecure-http",
        action="store_true",
        help="connect HTTP servers on plain http:// to another computer too (their headers, "
        "keys included, and every tool call travel unencrypted); without it such a server "
        'is listed as not connected, unless its entry has "llamadeskAllowInsecureHttp": true',
    )
    p.add_argument(
        "--timeout", type=float, default=20.0, metavar="S", help="seconds to wait for each server"
    )
    p.set_defaults(func=cmd_list)


def _transport(server: Any) -> dict[str, Any]:
    from app.mcp.config import StdioServer

    if isinstance(server, StdioServer):
        return {"transport": "stdio", "command": server.command, "args": list(server.args)}
    return {"transport": "http", "url": server.url}


def cmd_list(args: argparse.Namespace) -> int:
    import anyio

    from app.mcp.client import McpManager, ServerStatus
    from app.mcp.config import default_config_path, load_config

    config = load_config(args.config or default_config_path())
    if args.allow_insecure_http:
        config = config.allowing_insecure_http()

    async def gather() -> tuple[ServerStatus, ...]:
        async with McpManager(config, start_timeout=args.timeout) as manager:
            return manager.statuses

    statuses = anyio.run(gather)
    servers = []
    for server, status in zip(config.servers, statuses, strict=True):
        servers.append(
            {
                "name": server.name,
                **_transport(server),
                "connected": status.connected,
                "error": status.sentence or None,
                "tools": [
                    {
                        "name": t.name,
                        "description": t.description,
                        "input_schema": dict(t.input_schema),
                    }
                    for t in status.tools
                ],
            }
        )
    if args.json:
        json.dump({"servers": servers}, sys.stdout, indent=2, ensure_ascii=False)
        print()
    else:
        if not servers:
            print("No MCP servers are configured.")
        for entry in servers:
            where = entry.get("url") or " ".join([entry["command"], *entry["args"]])
            print(f"{entry['name']} ({entry['transport']}: {where})")
            if not entry["connected"]:
                print(f"  {entry['error']}")
            for tool in entry["tools"]:
                summary = (
                    tool["description"].strip().splitlines()[0]
                    if tool["description"].strip()
                    else ""
                )
                print(f"  {tool['name']}" + (f": {summary}" if summary else ""))
    return 0 if all(s.connected for s in statuses) else 1
