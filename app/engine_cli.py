"""``llamadesk inspect``, ``run`` and ``bench``: the engine from the command line.

For scripting, tests and benchmarks. Errors are :class:`LlamaDeskError` sentences; the
dispatcher in :mod:`app.cli` prints them and exits 2.
"""

from __future__ import annotations

import argparse
import json
import queue
import sys
import time
from collections.abc import Iterator
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from app import mcp_run_cli, remote_cli
from app.cli_flags import (
    BENCH_CONTEXT,
    BENCH_SPEC,
    RUN_CONTEXT,
    RUN_DEVICES,
    RUN_MODEL,
    RUN_SAMPLING,
    add_device_args,
    add_schema_args,
    cli_dest,
    cli_flag,
    schema_values,
)
from app.errors import LlamaDeskError
from app.settings_schema import (
    CONTEXT_FIELDS,
    DEVICE_FIELDS,
    MODEL_FIELDS,
    SAMPLING_FIELDS,
)

if TYPE_CHECKING:
    from app.engine import ContextSettings, ModelSettings, SamplingParams
    from app.engine.chat_template import TemplateChoice
    from app.session import Session
    from app.session.events import ConversationEvent, SessionEvent

T = TypeVar("T")


def _checked(settings: Any, *validate_args: Any) -> None:
    """``settings.validate()``, its error prefixed with the flag of the field it names."""
    from app.engine.settings import SettingsError

    try:
        settings.validate(*validate_args)
    except SettingsError as exc:
        spec = (
            CONTEXT_FIELDS.get(exc.field)
            or SAMPLING_FIELDS.get(exc.field)
            or MODEL_FIELDS.get(exc.field)
            or DEVICE_FIELDS.get(exc.field)
        )
        prefix = f"{cli_flag(spec)}: " if spec is not None and spec.cli is not None else ""
        raise SettingsError(exc.field, f"{prefix}{exc}", exc.fields) from None


def register(sub: Any) -> None:
    p = sub.add_parser(
        "inspect",
        help="show a GGUF model's metadata",
        description="Show a GGUF model's metadata without loading its weights.",
    )
    p.add_argument("model", help="path to a .gguf file")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument(
        "--fit",
        action="store_true",
        help="also say where the layers would go on this machine's devices (and --rpc workers)",
    )
    add_device_args(p, "devices (with --fit)")
    p.set_defaults(func=cmd_inspect)

    p = sub.add_parser(
        "run",
        help="generate text from a prompt",
        description="Generate from a prompt. Without --raw the prompt is a user message rendered "
        "through the model's chat template; with --raw it is tokenized as-is.",
    )
    p.add_argument(
        "model", nargs="?", help="path to a .gguf file (default: the configured or demo model)"
    )
    p.add_argument("prompt", nargs="?", default=None, help="the prompt ('-' reads standard input)")
    p.add_argument(
        "--raw", action="store_true", help="tokenize the prompt as-is instead of as a chat message"
    )
    p.add_argument("--system", metavar="TEXT", help="system prompt (chat mode)")
    add_schema_args(p.add_argument_group("sampling (each reply)"), RUN_SAMPLING)
    add_schema_args(p.add_argument_group("context"), RUN_CONTEXT)
    add_schema_args(p.add_argument_group("model"), RUN_MODEL)
    add_device_args(p)
    p.add_argument(
        "--parallel",
        type=int,
        default=1,
        metavar="N",
        help="run N sequences of the prompt in one batch",
    )
    p.add_argument(
        "--save-session", metavar="FILE", help="write the sequence's state file at the end"
    )
    p.add_argument(
        "--resume-session", metavar="FILE", help="restore a state file and continue from it"
    )
    p.add_argument(
        "--grammar",
        metavar="FILE",
        help="a GBNF grammar file the reply must follow (see resources/grammars/)",
    )
    p.add_argument(
        "--show-reasoning",
        action="store_true",
        help="also print a reasoning model's thinking (on standard error while streaming)",
    )
    p.add_argument(
        "--no-thinking",
        action="store_true",
        help="ask a reasoning model not to think (its template's enable_thinking=false)",
    )
    p.add_argument(
        "--reasoning-effort",
        choices=["low", "medium", "high"],
        default=None,
        help="how hard a reasoning model thinks, where its template has a choice",
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="print one JSON object with results (text, reasoning) and timings",
    )
    remote_cli.add_run_args(p)  # run --remote URL: app/remote_cli.py
    mcp_run_cli.add_run_args(p)  # run --mcp FILE: app/mcp_run_cli.py
    p.set_defaults(func=cmd_run)
    # Options may come between MODEL and PROMPT (`run m.gguf --raw "hi"`): app.cli parses
    # this subcommand again with parse_intermixed_args.
    p.set_defaults(_intermixed_parser=p)

    p = sub.add_parser(
        "bench",
        help="measure prompt and generation speed",
        description="Prompt tokens/s, generation tokens/s for 1 and N tabs, and the time to save, "
        "restore and re-process a long sequence.",
    )
    p.add_argument(
        "model", nargs="?", help="path to a .gguf file (default: the configured or demo model)"
    )
    p.add_argument(
        "--tabs", type=int, default=4, metavar="N", help="tabs generating together (default 4)"
    )
    p.add_argument(
        "--n-prompt", type=int, default=512, metavar="P", help="prompt tokens (default 512)"
    )
    p.add_argument(
        "--n-gen", type=int, default=64, metavar="G", help="generated tokens per tab (default 64)"
    )
    p.add_argument(
        "--n-state",
        type=int,
        default=2000,
        metavar="T",
        help="tokens in the save/restore test (default 2000)",
    )
    add_schema_args(p, BENCH_CONTEXT + BENCH_SPEC)
    add_device_args(p)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=cmd_bench)


def default_model_path() -> Path:
    """The configured model, else the bundled demo model."""
    from app import paths

    try:
        from app.storage.settings import AppSettings, load_settings

        settings = load_settings(AppSettings, paths.settings_path())
        last = getattr(settings, "last_model_path", None)
        if last and Path(last).is_file():
            return Path(last)
    except Exception:  # settings are a convenience here; the demo model always works
        pass
    demo = paths.demo_model_path()
    if not demo.is_file():
        raise LlamaDeskError(
            f"No model given and the demo model is missing ({demo}). Pass a .gguf file."
        )
    return demo


def _resolve_model_and_prompt(args: argparse.Namespace) -> tuple[Path, str]:
    model, prompt = args.model, args.prompt
    if model is not None and prompt is None and not model.endswith(".gguf") and not _is_path(model):
        model, prompt = None, model  # `llamadesk run "Hello"` uses the default model
    path = Path(model) if model else default_model_path()
    if prompt == "-":
        prompt = sys.stdin.read()
    return path, prompt or ""


def _is_path(text: str) -> bool:
    """Whether ``text`` names an existing file or folder (a long prompt is no file name: the
    system refuses names over 255 bytes with an error, which is an answer here)."""
    try:
        return Path(text).exists()
    except (OSError, ValueError):
        return False


def cmd_inspect(args: argparse.Namespace) -> int:
    from app.engine import template_choice
    from app.engine.metadata import read_model_header

    info, header = read_model_header(args.model)
    data = info.to_dict()
    # The template a load would use, chosen as run, serve and the window choose it.
    choice = template_choice.choose_for_file(info, header)
    data["chat_template_choice"] = choice.to_dict()
    fit = None
    if args.fit:
        from app.engine.offload import place

        fit = place(info, model_settings(args))
        data["fit"] = {**fit.plan.to_dict(), "devices": fit.to_dicts()}
    if args.json:
        print(json.dumps(data, indent=2, ensure_ascii=False))
        return 0
    rows = [
        ("File", info.path),
        ("Name", info.name or "-"),
        ("Architecture", info.architecture),
        ("Parameters", f"{info.params_label} ({info.n_params:,})"),
        ("Quantization", info.file_type),
        ("Size", f"{info.size_bytes / 2**20:,.1f} MiB"),
        ("Training context", f"{info.n_ctx_train:,}"),
        ("Layers", str(info.n_layer)),
        ("Embedding size", str(info.n_embd)),
        ("Heads / KV heads", f"{info.n_head} / {info.n_head_kv}"),
        ("Vocabulary", f"{info.n_vocab:,} ({info.tokenizer})"),
        ("BOS / EOS", f"{info.bos_token!r} / {info.eos_token!r}"),
        ("Encoder", "yes" if info.has_encoder else "no"),
        ("Chat template", _template_row(choice)),
    ]
    if fit is not None:
        rows.append(("Fit", fit.plan.describe()))
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        print(f"{key:<{width}}  {value}")
    return 0


def _template_row(choice: TemplateChoice) -> str:
    """``inspect``'s chat template line: the model's own, or which built-in one and why."""
    from app.engine.chat_template import TemplateSource

    if choice.source is TemplateSource.GGUF:
        return "the model's own"
    return f"built-in {choice.name}: {choice.reason}"


def context_settings(args: argparse.Namespace, n_seq: int) -> ContextSettings:
    """``run``'s context from its flags, validated (errors name the flag)."""
    from app.engine import ContextSettings
    from app.engine.threads import clamp_threads

    given = schema_values(args, RUN_CONTEXT)
    threads = given.pop("n_threads", None)
    settings = ContextSettings(**given, n_seq_max=max(1, n_seq))
    if isinstance(settings.n_batch, int):
        settings.n_ubatch = min(512, settings.n_batch)
    if threads is not None:  # -t sets both; under 1 is used as 1, in one sentence
        threads, note = clamp_threads(threads)
        if note is not None:
            print(f"llamadesk: {note}", file=sys.stderr)
        settings.n_threads = settings.n_threads_batch = threads
    _checked(settings)
    for warning in settings.thread_warnings():  # said before the model loads
        print(f"llamadesk: warning: {warning}", file=sys.stderr)
    return settings


def model_settings(args: argparse.Namespace) -> ModelSettings:
    """``run``'s and ``serve``'s per-model choices from their flags (the chat template, and
    for ``run`` the device placement), validated (errors name the flag)."""
    from app.engine import ModelSettings

    given = [spec for spec in (*RUN_MODEL, *RUN_DEVICES) if hasattr(args, cli_dest(spec))]
    settings = ModelSettings(**schema_values(args, tuple(given)))
    _checked(settings)
    return settings


def sampling_params(args: argparse.Namespace, grammar: str | None = None) -> SamplingParams:
    """``run``'s sampling from its flags, validated (errors name the flag)."""
    from app.engine import SamplingParams

    params = SamplingParams(**schema_values(args, RUN_SAMPLING), grammar=grammar)
    _checked(params)
    return params


def _read_grammar(path: str | None) -> str | None:
    """The text of ``--grammar FILE``, checked before llama.cpp parses it (a grammar beyond
    :data:`~app.engine.grammar_bounds.LIMITS` would crash the process)."""
    from app.engine.grammar_bounds import (
        LIMITS,
        GrammarBoundsError,
        GrammarSyntaxError,
        check_grammar,
    )

    if path is None:
        return None
    if not Path(path).is_file():
        raise LlamaDeskError(f"The grammar file {path} does not exist or is not a file.")
    try:
        # UTF-8 takes at most 4 bytes a character: a larger file is refused unread
        if Path(path).stat().st_size > 4 * LIMITS.max_chars:
            raise LlamaDeskError(
                f"The grammar file {path} is larger than a grammar may be "
                f"({LIMITS.max_chars:,} characters at most)."
            )
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise LlamaDeskError(f"The grammar file {path} cannot be read: {exc}.") from exc
    if not text.strip():
        raise LlamaDeskError(f"The grammar file {path} is empty.")
    try:
        check_grammar(text)
    except (GrammarBoundsError, GrammarSyntaxError) as exc:
        raise LlamaDeskError(f"The grammar file {path} cannot be used: {exc}") from None
    return text


def _session_wait(session: Session, future: Future[T]) -> T:
    """A session future's result (its error raised), or an error if the session died."""
    while True:
        try:
            return future.result(timeout=0.1)
        except FutureTimeout:
            if not session.is_running:
                raise LlamaDeskError("Internal error: the engine thread stopped.") from None


def _session_events(
    session: Session, events: queue.SimpleQueue[Any]
) -> Iterator[ConversationEvent | SessionEvent]:
    """The events the session sends ``events``, as they come (an error if it died)."""
    from app.rpc_supervisor import beat

    while True:
        try:
            event = events.get(timeout=0.1)
        except queue.Empty:
            if not session.is_running:
                raise LlamaDeskError("Internal error: the engine thread stopped.") from None
            continue
        beat()  # progress, for the watchdog of a run on remote devices (app.rpc_supervisor)
        yield event


def cmd_run(args: argparse.Namespace) -> int:
    """A client of the :class:`~app.session.Session` (as the window and the API server
    are): one without a state store or database, so nothing is persisted. Conversations
    1..N are the ``--parallel`` sequences; their turns start together in one batch."""
    from app import crash_supervisor, rpc_supervisor
    from app.engine.chat_template import ChatTemplate, ReasoningEffort, ReasoningOptions
    from app.engine.reasoning import Channel
    from app.engine.speculative import summary
    from app.offload_loader import OffloadLoader
    from app.session import ChatMessage, RestoreOutcome, Session, TurnId, TurnResult
    from app.session import events as ev

    if args.remote is not None or args.conversation is not None:
        return remote_cli.cmd_run_remote(args, sampling_params(args, _read_grammar(args.grammar)))
    placement = model_settings(args)
    # A remote device's failure aborts the process that uses it: run in a watched child.
    if (code := rpc_supervisor.supervise_if_remote(args, placement.rpc_servers)) is not None:
        return code
    # A crash in llama.cpp ends a forked child; this process then says what crashed.
    if (
        getattr(args, "_own_process", False)
        and not placement.rpc_servers.strip()
        and (code := crash_supervisor.supervise("run")) is not None
    ):
        return code
    path, prompt = _resolve_model_and_prompt(args)
    reasoning = ReasoningOptions(
        # No choice: the model's default (llama-server's rule, app/engine/chat_template).
        enable_thinking=False if args.no_thinking else None,
        effort=ReasoningEffort(args.reasoning_effort) if args.reasoning_effort else None,
    )
    if args.parallel < 1:
        raise LlamaDeskError(f"--parallel must be at least 1, not {args.parallel}.")
    params = sampling_params(args, _read_grammar(args.grammar))
    settings = context_settings(args, args.parallel)
    mcp_run_cli.check_without_mcp(args)
    if args.mcp is not None:
        return mcp_run_cli.cmd_run_mcp(args, path, prompt, params, reasoning, settings)
    per_model = placement  # the chat template and the devices
    if args.resume_session and not Path(args.resume_session).is_file():
        raise LlamaDeskError(
            f"The session file {args.resume_session} does not exist or is not a file."
        )
    stream = not args.json and args.parallel == 1
    cids = list(range(1, args.parallel + 1))
    events: queue.SimpleQueue[Any] = queue.SimpleQueue()
    # Every token's text as it comes (as the engine loop did), not coalesced for a window.
    loader = OffloadLoader()
    session = Session(stream_interval_s=0.0, name="llamadesk-run", loader=loader)
    try:
        session.subscribe_session(events.put)
        for cid in cids:
            session.subscribe(cid, events.put)
        t0 = time.perf_counter()
        session.load_model(str(path), settings, fallback=False, model_settings=per_model)
        for event in _session_events(session, events):
            if isinstance(event, ev.ModelLoadFailed):
                raise LlamaDeskError(event.message)
            if isinstance(event, ev.ModelLoaded):
                loaded = event.model
                if event.warning:  # e.g. fewer GPU layers than planned (app.offload_loader)
                    print(f"llamadesk: warning: {event.warning}", file=sys.stderr)
                break
        t_load = time.perf_counter() - t0
        if args.resume_session:
            for cid in cids:
                restored = _session_wait(
                    session, session.restore_state_file(cid, args.resume_session)
                )
                if restored.outcome is not RestoreOutcome.RESTORED:
                    raise LlamaDeskError(
                        f"The session file {args.resume_session} cannot be used with this model or these settings "
                        "(it is damaged, or was saved with another model or cache type)."
                    )
        turns: dict[int, TurnId] = {}
        with session.batch():
            for cid in cids:
                if args.resume_session:
                    turns[cid] = session.submit_text(cid, prompt, params, append=True)
                elif args.raw:
                    turns[cid] = session.submit_text(cid, prompt, params)
                else:
                    turns[cid] = session.submit(
                        cid,
                        [ChatMessage("user", prompt)],
                        system=args.system or "",
                        sampling=params,
                        reasoning=reasoning,
                    )
        t1 = time.perf_counter()
        started: set[int] = set()
        failures: dict[int, str] = {}
        errors: list[str] = []
        finished: dict[int, TurnResult] = {}
        shown_reasoning = False
        for event in _session_events(session, events):
            if isinstance(event, ev.SessionError):
                errors.append(event.message)
            elif isinstance(event, ev.TurnStarted):
                started.add(event.conversation_id)
            elif isinstance(event, ev.TurnFailed):
                failures.setdefault(event.conversation_id, event.message)
            elif isinstance(event, ev.TurnFinished) and turns.get(event.conversation_id) == (
                event.turn_id
            ):
                finished[event.conversation_id] = event.result
                if len(finished) == len(cids):
                    break
            elif stream and isinstance(event, ev.TextStreamed):
                if event.channel is Channel.ANSWER:
                    if shown_reasoning:  # the thinking ends on its own line
                        sys.stderr.write("\n")
                        shown_reasoning = False
                    sys.stdout.write(event.text)
                    sys.stdout.flush()
                elif args.show_reasoning:
                    sys.stderr.write(event.text)
                    sys.stderr.flush()
                    shown_reasoning = True
        elapsed = time.perf_counter() - t1
        for cid in cids:  # a turn refused before it started (e.g. the prompt is too long)
            if cid not in started:
                message = failures.get(cid) or finished[cid].error
                raise LlamaDeskError(message or "The prompt could not be processed.")
        if errors:  # the engine failed while stepping
            raise LlamaDeskError(errors[0])
        completions = [finished[cid] for cid in cids]
        if args.save_session:
            _session_wait(session, session.save_state_file(cids[0], args.save_session))
    finally:
        session.shutdown()
        session.join(30.0)
    if stream:
        sys.stdout.write("\n")
    n_gen = sum(c.n_tokens for c in completions)
    timings = {
        "load_s": round(t_load, 4),
        "total_s": round(elapsed, 4),
        "prompt_tokens": sum(c.n_prompt_processed for c in completions),
        "prompt_ms": round(max(c.prompt_ms for c in completions), 2),
        "generated_tokens": n_gen,
        "gen_ms": round(max(c.gen_ms for c in completions), 2),
        "gen_tokens_per_s": round(n_gen / max(1e-9, max(c.gen_ms for c in completions) / 1000), 2),
    }
    if args.json:
        results = [
            {
                "text": c.text,
                "reasoning": c.reasoning,
                "reasoning_ms": None if c.reasoning_ms is None else round(c.reasoning_ms, 1),
                "tokens": list(c.tokens),
                "finish_reason": c.finish_reason.value,
                "n_prompt": c.n_prompt,
            }
            for c in completions
        ]
        info = loaded.info
        choice = loaded.chat_template
        # How the model's template reasons and what a turn without a choice does (the
        # same rule the window and /props show).
        thinking = (
            ChatTemplate(choice.template, info.bos_token, info.eos_token, choice=choice)
            if choice is not None and choice.template
            else ChatTemplate.for_model(info.chat_template, info.bos_token, info.eos_token)
        )
        where = loader.placement
        print(
            json.dumps(
                {
                    "model": str(path),
                    "reasoning_defaults": thinking.reasoning_defaults.to_dict(),
                    # Which chat template was used and why (issue 20): "gemma",
                    # "builtin-by-vocabulary", and the sentence.
                    "chat_template_name": choice.name if choice else None,
                    "chat_template_source": choice.source.value if choice else None,
                    "chat_template_reason": choice.reason if choice else None,
                    "results": results,
                    "timings": timings,
                    "speculative": summary(params, completions),
                    "devices": where.to_dicts() if where is not None else [],
                    "plan": where.plan.describe() if where is not None else "",
                },
                ensure_ascii=False,
            )
        )
    elif args.parallel > 1:
        for i, c in enumerate(completions):
            thought = (
                f"[reasoning]\n{c.reasoning}\n[answer]\n"
                if args.show_reasoning and c.reasoning
                else ""
            )
            print(f"--- sequence {i + 1} ({c.finish_reason.value})\n{thought}{c.text}")
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    """Engine speed, measured on the :class:`~app.engine.Engine` itself, not through the
    :class:`~app.session.Session`: the session would add its thread hand-off, its event
    delivery and memory statistics to every step, which is noise in a figure meant to
    compare the engine's batch loop with llama.cpp's bare loop (benchmarks/bench_engine.py)
    and with itself across changes. ``run`` is the command that goes through the session."""
    from app.engine.bench import run_bench
    from app.rpc_supervisor import beat, supervise_if_remote

    per_model = model_settings(args)  # the device flags
    if (code := supervise_if_remote(args, per_model.rpc_servers)) is not None:
        return code
    for name in ("tabs", "n_prompt", "n_gen", "n_state"):
        if getattr(args, name) < 1:
            raise LlamaDeskError(
                f"--{name.replace('_', '-')} must be at least 1, not {getattr(args, name)}."
            )
    threads = CONTEXT_FIELDS["n_threads"]
    problem = None if args.threads is None else threads.problem(args.threads)
    if problem is not None:
        raise LlamaDeskError(f"{cli_flag(threads)}: {problem}")
    for spec in BENCH_SPEC:  # the flag named in the sentence, as run does
        value = getattr(args, cli_dest(spec))
        if value is not None and (problem := spec.problem(value)) is not None:
            raise LlamaDeskError(f"{cli_flag(spec)}: {problem}")
    path = Path(args.model) if args.model else default_model_path()
    result = run_bench(
        path,
        tabs=args.tabs,
        n_prompt=args.n_prompt,
        n_gen=args.n_gen,
        n_state=args.n_state,
        threads=args.threads,
        model_settings=per_model,
        on_step=beat,
        **schema_values(args, BENCH_SPEC),
    )
    if args.json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            print(f"{key:<32} {value}")
    return 0
