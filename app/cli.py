"""The ``llamadesk`` command: the window by default, subcommands for scripting.

Each area registers its own subcommands (``register(subparsers)``) so that this file
stays a dispatcher. Any :class:`~app.errors.LlamaDeskError` becomes one line on stderr and
exit code 2, never a traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from app import __version__
from app.errors import LlamaDeskError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="llamadesk",
        description="Chat with local GGUF language models. Without a subcommand, opens the window.",
    )
    parser.add_argument("--version", action="version", version=f"LlamaDesk {__version__}")
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="show llama.cpp's log on stderr"
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    from app import devices_cli, engine_cli, hub_cli, mcp_cli, server_cli

    engine_cli.register(sub)
    devices_cli.register(sub)
    mcp_cli.register(sub)
    hub_cli.register(sub)
    server_cli.register(sub)
    try:
        from app.storage import cli as storage_cli
    except ImportError:  # the storage commands are optional while that package is absent
        storage_cli = None  # type: ignore[assignment]
    if storage_cli is not None:
        storage_cli.register(sub)
    gui = sub.add_parser("gui", help="open the window (the default)")
    gui.set_defaults(func=_run_gui)
    return parser


def _run_gui(args: argparse.Namespace) -> int:
    from app.ui.main import run

    return run()


def _configure_logging(verbose: bool) -> None:
    """Warnings to stderr; llama.cpp's own chatter only with --verbose."""
    import logging

    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING, format="%(name)s: %(message)s"
    )
    logging.getLogger("llama.cpp").setLevel(logging.INFO if verbose else logging.ERROR)


def main(argv: Sequence[str] | None = None) -> int:
    argv_list = list(sys.argv[1:] if argv is None else argv)
    if argv_list[:1] == ["__load-check"]:  # app.engine.load_check's child in a frozen bundle
        from app.engine.load_check import child_main

        return child_main(argv_list[1:])
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv_list)
    sub_parser = getattr(args, "_intermixed_parser", None)
    if sub_parser is not None:
        # MODEL and PROMPT are both optional positionals; with options between them only
        # intermixed parsing works, and argparse cannot do that through subparsers.
        index = argv_list.index(args.command)
        for key, value in vars(sub_parser.parse_intermixed_args(argv_list[index + 1 :])).items():
            setattr(args, key, value)
    elif unknown:
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    args._argv = argv_list  # `run --rpc` runs this command line again in a watched child
    # This process's own command line (not a call from a test or another program): `run`
    # and `serve` may fork it into a watched child (app.crash_supervisor).
    args._own_process = argv is None
    _configure_logging(args.verbose)
    func = getattr(args, "func", None)
    if func is None:
        return _run_gui(args)
    try:
        result = func(args)
    except LlamaDeskError as exc:
        print(f"llamadesk: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("llamadesk: interrupted", file=sys.stderr)
        return 130
    return int(result or 0)


if __name__ == "__main__":
    raise SystemExit(main())
