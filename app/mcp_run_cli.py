"""``llamadesk run --mcp FILE [--allow NAME,...]``: one turn with the tools of MCP servers,
from the command line, without Qt.

The model's calls go through the loop guard (at most ``--max-rounds`` rounds, no call
repeated), the approval and the MCP connection, and each result goes back to the model
until it answers without calling. A call to a tool not in ``--allow`` is asked about on a
terminal (y/N) and refused without one (the model is told it was not allowed); nothing is
remembered ("always" is the window's, bound to the server's command or URL).

``--tool-choice required`` (or a tool's name) forces the first reply to be a call; the
next replies may call or answer (``auto``), so a forced choice cannot loop.
"""

from __future__ import annotations

import argparse
import json
import queue
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from app.errors import LlamaDeskError

if TYPE_CHECKING:
    from app.mcp.approval import ApprovalRequest, Decision

# (the MCP SDK and anyio load only for a run with --mcp: every other command starts fast)
DEFAULT_MAX_ROUNDS = 8  # app.mcp.loop_guard's, checked equal by tests/mcp/test_run_mcp.py

__all__ = ["add_run_args", "cmd_run_mcp"]

_CID = 1


def add_run_args(p: argparse.ArgumentParser) -> None:
    group = p.add_argument_group("tools (MCP servers)")
    group.add_argument(
        "--mcp", metavar="FILE", help="an mcp.json (mcpServers) whose tools the model may call"
    )
    group.add_argument(
        "--mcp-allow-insecure-http",
        action="store_true",
        help="connect the --mcp file's servers on plain http:// to another computer too "
        "(their headers, keys included, and every tool call travel unencrypted)",
    )
    group.add_argument(
        "--allow",
        metavar="NAME,...",
        default="",
        help="tools that run without asking (NAME or SERVER.NAME); others are asked about on "
        "a terminal and refused without one",
    )
    group.add_argument(
        "--tool-choice",
        metavar="CHOICE",
        default="auto",
        help="auto, none, required or a tool's name: the first reply's choice (default auto)",
    )
    group.add_argument(
        "--max-rounds",
        type=int,
        default=DEFAULT_MAX_ROUNDS,
        metavar="N",
        help=f"at most N rounds of tool calls (default {DEFAULT_MAX_ROUNDS})",
    )


def check_without_mcp(args: argparse.Namespace) -> None:
    """The tool flags mean nothing without ``--mcp``: say so rather than ignore them."""
    if args.mcp is not None:
        return
    given = [
        flag
        for flag, used in (
            ("--allow", bool(args.allow)),
            ("--mcp-allow-insecure-http", args.mcp_allow_insecure_http),
            ("--tool-choice", args.tool_choice != "auto"),
            ("--max-rounds", args.max_rounds != DEFAULT_MAX_ROUNDS),
        )
        if used
    ]
    if given:
        raise LlamaDeskError(f"{', '.join(given)} needs --mcp FILE (the MCP servers' tools).")


def _allowed(names: str) -> frozenset[str]:
    return frozenset(n.strip() for n in names.split(",") if n.strip())


def _asker(allowed: frozenset[str], interactive: bool) -> Any:
    import anyio.to_thread

    from app.mcp.approval import Decision

    async def ask(request: ApprovalRequest) -> Decision:
        names = {request.tool, f"{request.server}.{request.tool}"}
        if names & allowed:
            return Decision.ALLOW_ONCE
        if not interactive:
            sys.stderr.write(
                f"[tools] '{request.tool}' on '{request.server}' is not in --allow: refused.\n"
            )
            return Decision.DENY
        question = (
            f"[tools] Run '{request.tool}' on '{request.server}' ({request.binding}) with\n"
            f"{request.arguments_text}\nAllow? [y/N] "
        )

        def read() -> str:
            sys.stderr.write(question)
            sys.stderr.flush()
            return sys.stdin.readline()

        answer = await anyio.to_thread.run_sync(read)
        return Decision.ALLOW_ONCE if answer.strip().lower() in ("y", "yes") else Decision.DENY

    return ask


def cmd_run_mcp(
    args: argparse.Namespace,
    path: Path,
    prompt: str,
    sampling: Any,
    reasoning: Any,
    settings: Any,
) -> int:
    """Run the turn on the model ``path`` (``sampling``, ``reasoning``, ``settings``: run's
    own, from its flags)."""
    import anyio

    from app.mcp.config import load_config

    config = load_config(Path(args.mcp))
    if args.mcp_allow_insecure_http:
        config = config.allowing_insecure_http()
    if args.max_rounds < 1:
        raise LlamaDeskError(f"--max-rounds must be at least 1, not {args.max_rounds}.")
    return anyio.run(_run, args, path, prompt, config, sampling, reasoning, settings)


async def _run(
    args: argparse.Namespace,
    path: Path,
    prompt: str,
    config: Any,
    sampling: Any,
    reasoning: Any,
    settings: Any,
) -> int:
    import anyio.to_thread

    from app.engine.tool_calls import ToolSpecError, tool_specs
    from app.engine.tool_calls.request import ToolChoiceMode, ToolRequest
    from app.mcp.approval import ApprovalPolicy
    from app.mcp.client import McpManager
    from app.mcp.host import ModelCall, ToolHost
    from app.mcp.loop_guard import LoopGuard
    from app.session import ChatMessage, FinishReason, Session
    from app.session import events as ev

    events: queue.SimpleQueue[Any] = queue.SimpleQueue()
    session = Session(stream_interval_s=0.0, name="llamadesk-run-mcp")
    out: dict[str, Any] = {"rounds": []}
    try:
        session.subscribe_session(events.put)
        session.subscribe(_CID, events.put)
        session.load_model(str(path), settings, fallback=False)

        def until(kinds: tuple[type, ...], turn: Any = None) -> Any:
            while True:
                try:
                    event = events.get(timeout=0.1)
                except queue.Empty:
                    if not session.is_running:
                        raise LlamaDeskError("Internal error: the engine thread stopped.") from None
                    continue
                if isinstance(event, ev.TextStreamed) and not args.json:
                    if event.channel.value == "answer":
                        sys.stdout.write(event.text)
                        sys.stdout.flush()
                if isinstance(event, kinds) and (
                    turn is None or getattr(event, "turn_id", turn) == turn
                ):
                    return event

        loaded = await anyio.to_thread.run_sync(until, (ev.ModelLoaded, ev.ModelLoadFailed))
        if isinstance(loaded, ev.ModelLoadFailed):
            raise LlamaDeskError(loaded.message)
        async with McpManager(config) as manager:
            for status in manager.statuses:
                if not status.connected:
                    sys.stderr.write(f"[tools] {status.sentence}\n")
            with tempfile.TemporaryDirectory() as folder:
                # Nothing remembered: only --allow and this run's answers count.
                policy = ApprovalPolicy(Path(folder) / "permissions.json")
                host = ToolHost(manager, policy)
                try:
                    specs = tool_specs(host.openai_tools())
                    choice: Any = args.tool_choice
                    if choice not in ("auto", "none", "required"):
                        choice = {"type": "function", "function": {"name": choice}}
                    request = ToolRequest.from_openai(host.openai_tools(), choice, False)
                except ToolSpecError as exc:
                    raise LlamaDeskError(str(exc)) from None
                ask = _asker(_allowed(args.allow), sys.stdin.isatty())
                guard = LoopGuard(max_rounds=args.max_rounds)
                history = [ChatMessage("user", prompt)]
                while True:
                    turn = session.submit(
                        _CID,
                        history,
                        system=args.system or "",
                        sampling=sampling,
                        reasoning=reasoning,
                        tools=request if specs else None,
                    )
                    finished = await anyio.to_thread.run_sync(until, (ev.TurnFinished,), turn)
                    result = finished.result
                    if result.finish_reason is FinishReason.ERROR:
                        raise LlamaDeskError(result.error or "The reply failed.")
                    for problem in result.tool_errors:
                        sys.stderr.write(f"[tools] {problem}\n")
                    if result.finish_reason is not FinishReason.TOOL_CALLS:
                        out["text"] = result.text
                        out["finish_reason"] = result.finish_reason.value
                        break
                    calls = [
                        ModelCall(c.call_id, c.name, _object(c.parsed_arguments()))
                        for c in result.tool_calls
                    ]
                    for call in calls:
                        sys.stderr.write(
                            f"[tools] {call.name} {json.dumps(dict(call.arguments))}\n"
                        )
                    done = await host.run_round(calls, ask, guard)
                    history.append(
                        ChatMessage("assistant", result.text, tool_calls=result.tool_calls)
                    )
                    record = []
                    for message in done.messages:
                        history.append(
                            ChatMessage(
                                "tool",
                                message.content,
                                tool_call_id=message.call_id,
                                name=message.name,
                            )
                        )
                        sys.stderr.write(
                            f"[tools] -> {message.result.outcome.value}: {message.content[:200]}\n"
                        )
                        record.append(
                            {
                                "name": message.name,
                                "server": message.server,
                                "outcome": message.result.outcome.value,
                                "result": message.content,
                            }
                        )
                    out["rounds"].append(record)
                    # After the first round the model may answer: a forced choice would loop;
                    # after the loop guard's stop it must (no more calls are parsed).
                    mode = ToolChoiceMode.NONE if done.stopped else ToolChoiceMode.AUTO
                    if done.stopped:
                        sys.stderr.write(f"[tools] {done.stopped}\n")
                    if request.mode is not ToolChoiceMode.NONE:
                        request = ToolRequest(request.tools, mode, parallel=False)
    finally:
        session.shutdown()
        await anyio.to_thread.run_sync(session.join, 30.0)
    if args.json:
        print(json.dumps(out, ensure_ascii=False))
    else:
        sys.stdout.write("\n")
    return 0


def _object(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}
