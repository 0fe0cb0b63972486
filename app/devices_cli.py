"""``llamadesk devices`` and ``llamadesk rpc-worker``: what llama.cpp can run on, and
serving this machine's devices to another LlamaDesk.

Errors are :class:`~app.errors.LlamaDeskError` sentences; :mod:`app.cli` prints them and
exits 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from app.settings_schema import format_bytes

DEFAULT_RPC_PORT = 50052  # ggml-rpc-server's default (app.engine.rpc_probe.DEFAULT_PORT)


def register(sub: Any) -> None:
    p = sub.add_parser(
        "devices",
        help="list the devices llama.cpp can use (CPU, GPUs, remote workers)",
        description="List every device of llama.cpp's registry with its type and memory, "
        "the backends this build has, and how to get the others.",
    )
    p.add_argument(
        "--rpc",
        metavar="HOST:PORT[,...]",
        default="",
        help="also add these RPC workers (`llamadesk rpc-worker` on that machine)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=cmd_devices)

    p = sub.add_parser(
        "rpc-worker",
        help="serve this machine's devices to another LlamaDesk (llama.cpp RPC)",
        description="Serve this machine's GPUs (else its CPU) over llama.cpp's RPC protocol "
        "until stopped (Ctrl+C or a signal). The protocol has no authentication or "
        "encryption: it listens on loopback unless --trusted-network is given; reach it "
        "through an SSH tunnel or WireGuard (see the README).",
    )
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument(
        "--port", type=int, default=DEFAULT_RPC_PORT, help=f"port (default {DEFAULT_RPC_PORT})"
    )
    p.add_argument(
        "--cache",
        action="store_true",
        help="keep received weights in a local cache folder so that a reload sends only hashes",
    )
    p.add_argument(
        "--threads", type=int, default=None, metavar="N", help="CPU threads (default: half)"
    )
    p.add_argument(
        "--trusted-network",
        action="store_true",
        help="allow an address other than loopback: every machine that reaches the port "
        "can use this machine's devices, with no password",
    )
    p.add_argument(
        "--memory-limit",
        type=int,
        default=None,
        metavar="MIB",
        help="refuse allocations beyond MIB mebibytes more than the worker uses at start "
        "(Linux: its address space): a client's load that asks for more is retried with "
        "fewer layers",
    )
    p.set_defaults(func=cmd_rpc_worker)


def cmd_devices(args: argparse.Namespace) -> int:
    from app.engine import devices as dev
    from app.engine.rpc_probe import parse_endpoints

    for endpoint in parse_endpoints(args.rpc):
        dev.add_rpc_server(str(endpoint))
    listed = dev.list_devices()
    have = dev.backends()
    missing = dev.missing_backends()
    if args.json:
        print(
            json.dumps(
                {
                    "devices": [d.to_dict() for d in listed],
                    "backends": list(have),
                    "available_builds": [
                        {
                            "backend": b.name,
                            "label": b.label,
                            "install": dev.install_command(b.cmake_flag) if b.cmake_flag else "",
                            "note": b.note,
                        }
                        for b in missing
                    ],
                }
            )
        )
        return 0
    width = max(len(d.name) for d in listed)
    for d in listed:
        memory = (
            f"{format_bytes(d.free_bytes)} free of {format_bytes(d.total_bytes)}"
            if d.total_bytes
            else "memory unknown"
        )
        print(f"{d.name:<{width}}  {d.kind.value:<14}  {memory:<28}  {d.description}")
    print(f"\nThis build's backends: {', '.join(have)}.")
    if not any(d.kind.offloads for d in listed):
        print("No GPU or remote device: models run on the CPU.")
    for b in missing:
        how = dev.install_command(b.cmake_flag) if b.cmake_flag else b.note
        print(f"  {b.label}: {how}" + (f"  ({b.note})" if b.cmake_flag else ""))
    return 0


def cmd_rpc_worker(args: argparse.Namespace) -> int:
    from app import paths
    from app.engine.rpc_probe import parse_endpoint
    from app.engine.rpc_worker import check_bind, serve
    from app.fsutil import make_private_dir

    endpoint = parse_endpoint(f"{args.host}:{args.port}")
    check_bind(endpoint, args.trusted_network)
    if args.threads is not None and args.threads < 1:
        from app.errors import LlamaDeskError

        raise LlamaDeskError(f"--threads must be at least 1, not {args.threads}.")
    # Received weights are the user's models: owner-only, as the rest of the data folder.
    cache: Path | None = make_private_dir(paths.data_dir() / "rpc-cache") if args.cache else None
    if args.memory_limit is not None:
        from app.engine.rpc_worker import limit_memory

        limit_memory(args.memory_limit)
    sys.stdout.flush()
    serve(endpoint, cache, args.threads)
    return 1
