"""``llamadesk run --mcp FILE [--allow NAME,...]``: one turn with the tools of MCP servers,
from the command line, without Qt.

The model's calls go through the loop guard (at most ``--max-rounds`` rounds, no call
repeated), the approval and the MCP connection, and each result goes back to the model
until it answers without calling. A call to a tool not in ``--allow`` is asked about on a
terminal (y/N) and refused without one (the model is told it was not allowed); nothing is
remembered ("always" is the window's, bound to the server's command or URL).

``--tool-choice required`` (or a tool's name) forces the first reply to be a call; the
next replies may call or answer (``auto``), so a forced choice cannot loop.

``--allow`` names a tool as ``SERVER.TOOL``, or by its name alone where only one server has
a tool of that name (a name two servers share is refused with a sentence: allowing one
server's ``echo`` must not run another's). A tool whose schema cannot be turned into a
grammar is left out with a warning naming it (the others still work). Each result goes
to the model cut to ``--max-tool-result`` characters, with a note saying it was cut.

With ``--remote URL`` the remote server answers (and makes the call grammar); nothing is
stored.
"""

from __future__ import annotations

import argparse
import json
import queue
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from app.errors import LlamaDeskError

if TYPE_CHECKING:
    from app.mcp.approval import ApprovalRequest, Decision

# (the MCP SDK and anyio load only for a run with --mcp: every other command starts fast)
DEFAULT_MAX_ROUNDS = 8  # app.mcp.loop_guard's, checked equal by tests/mcp/test_run_mcp.py
DEFAULT_MAX_RESULT_CHARS = 16_000  # app.mcp.client's, checked equal by tests/mcp

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
        help="tools that run without asking: SERVER.TOOL, or TOOL where only one server has "
        "a tool of that name; others are asked about on a terminal and refused without one",
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
    group.add_argument(
        "--max-tool-result",
        type=int,
        default=None,
        metavar="CHARS",
        help="the model reads at most this many characters of a tool's result, then a note "
        f"that it was cut (default: half the context's tokens, at most "
        f"{DEFAULT_MAX_RESULT_CHARS:,})",
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
            ("--max-tool-result", args.max_tool_result is not None),
        )
        if used
    ]
    if given:
        raise LlamaDeskError(f"{', '.join(given)} needs --mcp FILE (the MCP servers' tools).")


def allowed_tools(names: str, tools: Iterable[tuple[str, str]]) -> frozenset[tuple[str, str]]:
    """The (server, tool) pairs ``--allow`` names among ``tools`` (the connected servers'
    pairs). ``SERVER.TOOL`` names one; a bare ``TOOL`` names the one server's tool of that
    name and is refused with a sentence when several servers have one. A name that matches
    no tool is said on stderr (a typo must not pass silently)."""
    pairs = sorted(set(tools))
    out: set[tuple[str, str]] = set()
    for name in (n.strip() for n in names.split(",")):
        if not name:
            continue
        qualified = [p for p in pairs if f"{p[0]}.{p[1]}" == name]
        if qualified:
            out.update(qualified)
            continue
        bare = [p for p in pairs if p[1] == name]
        if len(bare) > 1:
            servers = " and ".join(f"'{server}'" for server, _ in bare)
            raise LlamaDeskError(
                f"--allow {name}: the servers {servers} each have a tool '{name}'; name the "
                f"one to allow as SERVER.TOOL (e.g. {bare[0][0]}.{name})."
            )
        if not bare:
            sys.stderr.write(f"[tools] --allow {name}: no connected server has that tool.\n")
        out.update(bare)
    return frozenset(out)


def _asker(allowed: frozenset[tuple[str, str]], interactive: bool) -> Any:
    import anyio.to_thread

    from app.mcp.approval import Decision

    async def ask(request: ApprovalRequest) -> Decision:
        if (request.server, request.tool) in allowed:
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

    config = _checked_config(args)
    return anyio.run(_run, args, str(path), prompt, config, sampling, reasoning, settings, None)


def cmd_run_mcp_remote(
    args: argparse.Namespace, loader: Any, prompt: str, sampling: Any, reasoning: Any
) -> int:
    """``run --remote URL --mcp FILE``: the same turn, answered by the remote server
    (``loader``: its :class:`~app.remote.RemoteLoader`); the tools go in its requests."""
    import anyio

    from app.engine import ContextSettings

    if args.conversation is not None:
        raise LlamaDeskError(
            "--conversation cannot be combined with --mcp (a run with tools stores nothing)."
        )
    config = _checked_config(args)
    model = loader.conn.model or ""
    settings = ContextSettings()
    return anyio.run(_run, args, model, prompt, config, sampling, reasoning, settings, loader)


def _checked_config(args: argparse.Namespace) -> Any:
    from app.mcp.config import load_config

    config = load_config(Path(args.mcp))
    if args.mcp_allow_insecure_http:
        config = config.allowing_insecure_http()
    if args.max_rounds < 1:
        raise LlamaDeskError(f"--max-rounds must be at least 1, not {args.max_rounds}.")
    if args.max_tool_result is not None and args.max_tool_result < 100:
        raise LlamaDeskError(
            f"--max-tool-result must be at least 100 characters, not {args.max_tool_result}."
        )
    return config


async def _run(
    args: argparse.Namespace,
    model: str,
    prompt: str,
    config: Any,
    sampling: Any,
    reasoning: Any,
    settings: Any,
    loader: Any,
) -> int:
    import anyio.to_thread

    from app.engine.tool_calls import ToolSpecError, tool_specs
    from app.engine.tool_calls.request import ToolChoiceMode, ToolRequest
    from app.engine.tool_calls.usable import usable_tools
    from app.mcp.approval import ApprovalPolicy
    from app.mcp.client import McpManager
    from app.mcp.host import ModelCall, ToolHost
    from app.mcp.loop_guard import LoopGuard
    from app.session import ChatMessage, FinishReason, Session
    from app.session import events as ev

    events: queue.SimpleQueue[Any] = queue.SimpleQueue()
    session = Session(stream_interval_s=0.0, name="llamadesk-run-mcp", loader=loader)
    out: dict[str, Any] = {"rounds": []}
    failed = False
    try:
        session.subscribe_session(events.put)
        session.subscribe(_CID, events.put)
        session.load_model(model, settings, fallback=False)

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
                host = ToolHost(manager, policy, max_result_chars=_result_bound(args, loaded))
                offered, warnings = usable_tools(host.openai_tools())
                for warning in warnings:
                    sys.stderr.write(f"[tools] {warning}\n")
                try:
                    specs = tool_specs(offered)
                    choice: Any = args.tool_choice
                    if choice not in ("auto", "none", "required"):
                        choice = {"type": "function", "function": {"name": choice}}
                    request = ToolRequest.from_openai(offered, choice, False)
                except ToolSpecError as exc:
                    raise LlamaDeskError(str(exc)) from None
                pairs = [(t.server, t.name) for s in manager.statuses for t in s.tools]
                ask = _asker(allowed_tools(args.allow, pairs), sys.stdin.isatty())
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
                        cut = _cut_call(result, request)
                        if cut:
                            out["error"] = cut
                            sys.stderr.write(f"[tools] {cut}\n")
                            failed = True
                        break
                    calls = [
                        ModelCall(c.call_id, c.name, _object(c.parsed_arguments()))
                        for c in result.tool_calls
                    ]
                    for call in calls:
                        sys.stderr.write(
                            f"[tools] {call.name} {json.dumps(dict(call.arguments))}\n"
                        )
                    arguments = {c.call_id: dict(c.arguments) for c in calls}
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
                                "arguments": arguments.get(message.call_id, {}),
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
    return 1 if failed else 0


def _result_bound(args: argparse.Namespace, loaded: Any) -> int:
    """How many characters of a result the model reads: ``--max-tool-result``, else half
    the context in characters (a token is a character or more; a result that fills the
    context ends the turn instead of informing it), at most the default."""
    if args.max_tool_result is not None:
        return int(args.max_tool_result)
    n_ctx = int(getattr(loaded.model, "n_ctx_seq", 0) or 0)
    if n_ctx <= 0:  # an engine that does not say (remote): the default
        return DEFAULT_MAX_RESULT_CHARS
    return max(1000, min(DEFAULT_MAX_RESULT_CHARS, n_ctx // 2))


def _cut_call(result: Any, request: Any) -> str:
    """The sentence for a reply that ran out of tokens while writing a call ("" when it
    did not): a forced reply is a call, and an ``auto`` one that started a call it did
    not finish has a sentence for it in ``tool_errors``."""
    from app.engine.tool_calls.request import ToolChoiceMode
    from app.session import FinishReason

    if result.finish_reason is not FinishReason.LENGTH:
        return ""
    forced = request.mode in (ToolChoiceMode.REQUIRED, ToolChoiceMode.NAMED)
    if forced or result.tool_calls or result.tool_errors:
        return (
            f"The reply reached the token limit ({result.n_tokens:,} tokens, -n) while "
            "writing a tool call, so the call was not made; raise -n."
        )
    return ""


def _object(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}
