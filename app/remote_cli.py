"""``llamadesk run --remote URL``: a turn answered by a remote server, stored in the app's
database, and ``--conversation ID`` to go on with a stored conversation.

Unlike a local ``run`` (nothing persisted), a remote run records its conversation
(``llamadesk chats`` lists it) through the session's recorder, as the window does. A
continued conversation's history comes from the database and is sent as it was sent
before, so the server's prompt cache holds it (``cached_tokens`` in the JSON). The hook in
:mod:`app.engine_cli` adds the flags (:func:`add_run_args`) and hands such a run here
(:func:`cmd_run_remote`).
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import sys
import time
from typing import TYPE_CHECKING, Any

from app.errors import LlamaDeskError

if TYPE_CHECKING:
    from app.engine import SamplingParams
    from app.remote import RemoteConnection
    from app.session import Session

API_KEY_ENV = "LLAMADESK_REMOTE_API_KEY"
WAIT_S = 0.1


def add_run_args(parser: argparse.ArgumentParser) -> None:
    """``run``'s remote flags."""
    group = parser.add_argument_group("remote engine (a turn answered by another server)")
    _add_connection_args(group)
    group.add_argument(
        "--conversation",
        type=int,
        metavar="ID",
        help="go on with this stored conversation (with --remote)",
    )


def add_serve_args(parser: argparse.ArgumentParser) -> None:
    """``serve``'s remote flags: this server becomes a front for another one."""
    group = parser.add_argument_group(
        "remote engine (serve another server's model: named conversations, the request log)"
    )
    _add_connection_args(group)


def serve_loader(args: argparse.Namespace) -> Any:
    """``serve --remote URL``: the :class:`~app.remote.RemoteLoader` (None: serve a local
    model), after refusing what needs a local model."""
    from app.remote import RemoteLoader

    if args.remote is None:
        return None
    if args.model is not None:
        raise LlamaDeskError(
            "With --remote there is no model file: name the remote model with --remote-model."
        )
    if args.embeddings:
        raise LlamaDeskError("--embeddings works with a local model only, not with --remote.")
    return RemoteLoader(_connection(args))


def _add_connection_args(group: Any) -> None:
    group.add_argument(
        "--remote",
        metavar="URL",
        help="an OpenAI-compatible server (llama-server, vLLM, Ollama, LM Studio, another "
        "LlamaDesk) answers, e.g. http://127.0.0.1:8080; the conversation is stored",
    )
    group.add_argument(
        "--remote-model",
        metavar="NAME",
        help="the model on that server: its id, or its file name (llama-server lists a path); "
        "default: its first",
    )
    group.add_argument(
        "--remote-api-key",
        metavar="KEY",
        default=os.environ.get(API_KEY_ENV),
        help="sent as 'Authorization: Bearer KEY'. A key on the command line is visible to "
        f"every user of this computer (ps, /proc/PID/cmdline): set {API_KEY_ENV} instead "
        "(read when --remote-api-key is not given)",
    )
    group.add_argument(
        "--remote-allow-insecure-http",
        action="store_true",
        help="allow plain http:// to another computer (the key and the messages travel "
        "unencrypted); not needed for https:// or the loopback",
    )
    group.add_argument(
        "--remote-timeout",
        type=float,
        default=None,
        metavar="SECONDS",
        help="give a reply up when the server sends nothing for this long (default 300)",
    )


def _connection(args: argparse.Namespace) -> RemoteConnection:
    from app.remote import RemoteConnection
    from app.remote.connection import READ_TIMEOUT_S

    conn = RemoteConnection(
        args.remote,
        api_key=args.remote_api_key or None,
        model=args.remote_model or None,
        allow_insecure=args.remote_allow_insecure_http,
        read_timeout_s=args.remote_timeout if args.remote_timeout is not None else READ_TIMEOUT_S,
    )
    conn.validate()
    return conn


def _prompt(args: argparse.Namespace) -> str:
    """``run --remote URL "prompt"``: the one positional is the prompt (no model file)."""
    if args.model is not None and args.prompt is not None:
        raise LlamaDeskError(
            "With --remote there is no model file: give the prompt alone, and the model "
            "with --remote-model."
        )
    prompt = args.prompt if args.prompt is not None else args.model
    if prompt == "-":
        prompt = sys.stdin.read()
    if not prompt or not prompt.strip():
        raise LlamaDeskError("Give a prompt to send to the remote server.")
    return str(prompt)


def _refuse_local_flags(args: argparse.Namespace) -> None:
    if args.remote is None:
        raise LlamaDeskError(
            "--conversation goes on with a stored conversation through --remote URL "
            "(a local run stores nothing)."
        )
    for flag, given in (
        ("--raw", args.raw),
        ("--parallel", args.parallel != 1),
        ("--save-session", args.save_session),
        ("--resume-session", args.resume_session),
    ):
        if given:
            raise LlamaDeskError(f"{flag} works with a local model only, not with --remote.")


def _wait_loaded(session: Session, events: queue.SimpleQueue[Any]) -> Any:
    from app.session import events as ev

    while True:
        event = _next(session, events)
        if isinstance(event, ev.ModelLoadFailed):
            raise LlamaDeskError(event.message)
        if isinstance(event, ev.ModelLoaded):
            return event


def _next(session: Session, events: queue.SimpleQueue[Any]) -> Any:
    while True:
        try:
            return events.get(timeout=WAIT_S)
        except queue.Empty:
            if not session.is_running:
                raise LlamaDeskError("Internal error: the session thread stopped.") from None


def cmd_run_remote(args: argparse.Namespace, params: SamplingParams) -> int:
    """See the module docstring; ``params``: the run's sampling flags, checked. Exit 0 on a
    whole reply, 1 when it failed or stopped part-way (what came is stored and printed,
    the sentence on stderr and in the JSON)."""
    from app import mcp_run_cli
    from app.engine import ContextSettings
    from app.engine.chat_template import ReasoningEffort, ReasoningOptions
    from app.engine.reasoning import Channel
    from app.remote import RemoteLoader
    from app.session import FinishReason, Session
    from app.session import events as ev
    from app.storage import Database

    _refuse_local_flags(args)
    mcp_run_cli.check_without_mcp(args)
    conn = _connection(args)
    prompt = _prompt(args)
    reasoning = ReasoningOptions(
        enable_thinking=False if args.no_thinking else None,  # None: the model's default
        effort=ReasoningEffort(args.reasoning_effort) if args.reasoning_effort else None,
    )
    loader = RemoteLoader(conn)
    if args.mcp is not None:  # the MCP servers' tools go in the remote server's requests
        return mcp_run_cli.cmd_run_mcp_remote(args, loader, prompt, params, reasoning)
    with Database.open() as db:
        # a stored conversation is checked before the server is asked anything
        stored = db.get_conversation(args.conversation) if args.conversation is not None else None
        session = Session(
            None, db, stream_interval_s=0.0, name="llamadesk-run-remote", loader=loader
        )
        events: queue.SimpleQueue[Any] = queue.SimpleQueue()
        failure: str | None = None
        try:
            session.subscribe_session(events.put)
            t0 = time.perf_counter()
            session.load_model(conn.model or "", ContextSettings(), fallback=False)
            loaded = _wait_loaded(session, events)
            t_load = time.perf_counter() - t0
            if stored is not None:
                thread = db.get_thread(stored.id)
                parent = thread[-1].id if thread else None
                system = args.system if args.system is not None else stored.system_prompt
                cid = stored.id
            else:  # made once the server answered: a failed load leaves no empty chat
                cid = db.create_conversation(system_prompt=args.system or "").id
                parent, system = None, args.system or ""
            session.subscribe(cid, events.put)
            session.open(cid)
            recorded = session.answer(
                cid, parent, prompt, system=system, sampling=params, reasoning=reasoning
            )
            stream = not args.json
            result = None
            while result is None:
                event = _next(session, events)
                if isinstance(event, ev.TurnFailed):
                    failure = failure or event.message
                elif isinstance(event, ev.TurnFinished):
                    result = event.result
                elif stream and isinstance(event, ev.TextStreamed):
                    answer = event.channel is Channel.ANSWER
                    if answer or args.show_reasoning:
                        where = sys.stdout if answer else sys.stderr
                        where.write(event.text)
                        where.flush()
            turn = recorded.result() if recorded.done() and recorded.exception() is None else None
        finally:
            session.shutdown()
            session.join(30.0)
    engine = loader.engine
    reports_cached = engine.reports_cached if engine is not None else None
    cached = result.n_prompt - result.n_prompt_processed if reports_cached else None
    error = failure or result.error
    if args.json:
        notes = list(engine.unavailable()) if engine is not None else []
        out: dict[str, Any] = {
            "conversation_id": cid,
            "reply_id": turn.reply_message_id if turn is not None else None,
            "model": loaded.model.path,
            "engine": loaded.model.engine,
            "text": result.text,
            "reasoning": result.reasoning,
            "finish_reason": result.finish_reason.value,
            "error": error,
            "cached_tokens": cached,
            "prompt_tokens": result.n_prompt,
            "prompt_tokens_processed": result.n_prompt_processed,
            "completion_tokens": result.n_sampled,
            "unavailable": notes,
            "timings": {
                "load_s": round(t_load, 4),
                "prompt_ms": round(result.prompt_ms, 2),
                "gen_ms": round(result.gen_ms, 2),
                "gen_tokens_per_s": round(result.tokens_per_second, 2),
            },
        }
        print(json.dumps(out, ensure_ascii=False))
    else:
        sys.stdout.write("\n")
        sys.stdout.flush()
        print(f"conversation {cid} · {loaded.model.engine}", file=sys.stderr)
    if error:
        if not args.json:
            print(f"llamadesk: {error}", file=sys.stderr)
        return 1
    if result.finish_reason is FinishReason.ERROR:
        return 1
    return 0
