"""``llamadesk serve``: the OpenAI-compatible server without a window."""

from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path
from typing import Any

from app import engine_cli, remote_cli
from app.cli_flags import RUN_MODEL, add_device_args, add_schema_args
from app.engine_cli import context_settings, default_model_path
from app.errors import LlamaDeskError
from app.settings_schema import CONTEXT_FIELDS

# The poolings that give one vector (or score) per input; "none" gives one per token.
POOLING_CHOICES = ("mean", "cls", "last", "rank")

SERVE_CONTEXT = tuple(CONTEXT_FIELDS[name] for name in ("n_ctx", "n_batch", "n_threads"))


def register(sub: Any) -> None:
    p = sub.add_parser(
        "serve",
        help="serve the model over an OpenAI-compatible HTTP API",
        description="Serve a model to other programs (OpenAI clients, curl, editors) on "
        "/v1/chat/completions, /v1/completions, /v1/embeddings and llama-server's /health, "
        "/props, /tokenize, /detokenize, /apply-template, /slots. Ctrl+C stops it.",
    )
    p.add_argument(
        "model", nargs="?", help="path to a .gguf file (default: the configured or demo model)"
    )
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8080, help="port (default 8080; 0: any free port)")
    p.add_argument(
        "--api-key",
        metavar="KEY",
        default=os.environ.get("LLAMADESK_API_KEY"),
        help="require 'Authorization: Bearer KEY'; needed to listen beyond the loopback. A "
        "key on the command line is visible to every user of this computer (ps, "
        "/proc/PID/cmdline): set LLAMADESK_API_KEY instead (read when --api-key is not "
        "given)",
    )
    p.add_argument(
        "--parallel",
        type=int,
        default=4,
        metavar="N",
        help="requests generating at once, decoded together (default 4)",
    )
    p.add_argument(
        "--queue",
        type=int,
        default=16,
        metavar="N",
        help="requests waiting for a free slot before 503 (default 16)",
    )
    p.add_argument(
        "--resident",
        type=int,
        default=0,
        metavar="N",
        help="idle API conversations whose caches stay in memory (default 2 x --parallel)",
    )
    p.add_argument("--alias", metavar="NAME", help="the model's name in /v1/models")
    p.add_argument(
        "--cors-origin",
        action="append",
        default=[],
        metavar="ORIGIN",
        help="allow browser pages from ORIGIN ('*': any); repeatable (default: CORS off)",
    )
    p.add_argument(
        "--embeddings",
        action="store_true",
        help="a context that computes embeddings (/v1/embeddings)",
    )
    p.add_argument(
        "--pooling",
        choices=POOLING_CHOICES,
        metavar="{" + ",".join(POOLING_CHOICES) + "}",
        help="how --embeddings combines the tokens' vectors into one: mean, cls (first "
        "token), last, or rank (a reranker's score; /v1/embeddings refuses it) "
        "(default: the model's own pooling, else mean)",
    )
    p.add_argument(
        "--no-persist",
        action="store_true",
        help="keep API conversations and caches in memory only (not in the app's database)",
    )
    add_schema_args(p.add_argument_group("context"), SERVE_CONTEXT)
    add_schema_args(p.add_argument_group("model"), RUN_MODEL)
    add_device_args(p)  # where the layers go; --rpc: see cmd_serve
    remote_cli.add_serve_args(p)  # serve --remote URL: app/remote_cli.py
    p.set_defaults(func=cmd_serve)


def cmd_serve(args: argparse.Namespace) -> int:
    from app import crash_supervisor, rpc_supervisor
    from app.engine import ContextSettings, ModelSettings
    from app.server import ServerConfig, ServerRunner

    per_model = engine_cli.model_settings(args)  # --chat-template, devices, before binding
    given = rpc_supervisor.private_settings()  # this is a private server (the parent's)
    if given is not None:
        per_model = ModelSettings.from_dict(given[1])
        rpc_supervisor.end_with_parent()
    config = ServerConfig(
        host=args.host,
        port=args.port,
        api_key=args.api_key or None,
        parallel=args.parallel,
        max_queue=args.queue,
        max_resident=args.resident,
        cors_origins=tuple(args.cors_origin),
        model_alias=args.alias,
    )
    config.validate()
    if args.pooling and not args.embeddings:
        raise LlamaDeskError("--pooling chooses how embeddings are pooled: add --embeddings.")
    loader = remote_cli.serve_loader(args)  # None: a local model
    path: Path | str = Path(args.model) if args.model else ""
    if loader is not None:
        path = args.remote_model or ""  # the model's name on the remote server
    elif not args.model:
        path = default_model_path()
    # A crash in llama.cpp ends a forked child (before it binds the port); this process
    # then says what crashed. Remote devices have their own watcher (rpc_supervisor).
    if (
        getattr(args, "_own_process", False)
        and loader is None
        and given is None
        and not per_model.rpc_servers.strip()
        and (code := crash_supervisor.supervise("serve")) is not None
    ):
        return code
    n_seq = config.resident + config.parallel
    if args.embeddings:
        # The engine's embeddings abort in ggml (GGML_ASSERT ggml_can_mul_mat) when
        # n_seq_max does not divide n_ubatch (seen with 6 and 17 on a 256 micro-batch):
        # a power of two up to 16 is safe.
        n_seq = min(16, 1 << (max(1, n_seq).bit_length() - 1))
    settings = context_settings(args, n_seq)
    if given is not None:
        settings = ContextSettings.from_dict(given[0])
    private = None
    if per_model.rpc_servers.strip() and not rpc_supervisor.in_child():
        if loader is not None or args.embeddings:
            raise LlamaDeskError(
                "--rpc places a local model's layers on remote workers; it cannot go with "
                "--remote (that server chooses its own devices) or --embeddings."
            )
        # llama.cpp aborts the process when a remote worker goes away: the model runs in a
        # private server child, reached as a remote engine, so this server stays up.
        private = rpc_supervisor.PrivateServer(
            str(path), settings.to_dict(), per_model.to_dict(), config.parallel
        )
        loader, path = private.loader(), ""
    if args.embeddings:
        from app.engine.embeddings import default_pooling

        settings.embeddings = True
        settings.pooling_type = args.pooling or default_pooling(Path(path))
    try:
        runner = ServerRunner(
            path,
            settings,
            config,
            persist=not args.no_persist,
            loader=loader,
            model_settings=per_model,
        )
        if private is not None:  # /health and requests say when the worker took it away
            runner.service.model_down = private.down
            runner.service.private_front = True
        loaded = runner.start(background=True)  # /health answers "loading" meanwhile
    except BaseException:
        if private is not None:
            private.close()
        raise

    def on_signal(signum: int, frame: Any) -> None:
        runner.stop_listening()

    previous = signal.signal(signal.SIGTERM, on_signal)
    if loaded.notice:  # e.g. loaded without the CPU kernels that crashed (issue 27)
        print(f"llamadesk: warning: {loaded.notice}", file=sys.stderr, flush=True)
    print(
        f"LlamaDesk is serving {Path(loaded.path).name} (context {loaded.n_ctx:,}, "
        f"{config.parallel} at once) at {runner.url}/v1",
        flush=True,
    )
    try:
        runner.wait()
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
        print("LlamaDesk server: stopping (saving the conversations' caches)…", file=sys.stderr)
        with crash_supervisor.repeats_ignored():  # the stop signal may come twice
            runner.close()
            if private is not None:
                private.close()
    return 0
