"""``llamadesk pull`` and ``llamadesk models``: get models from the Hub, list the library.

Errors are :class:`~app.errors.LlamaDeskError` sentences; :mod:`app.cli` prints them and
exits 2.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from app.errors import LlamaDeskError


def register(sub: Any) -> None:
    p = sub.add_parser(
        "pull",
        help="download a GGUF model from the Hugging Face Hub",
        description="Download a GGUF model into the library folder, resumably, checked "
        "against the SHA-256 the Hub publishes. REPO[:QUANT] picks a quantization (e.g. "
        "Qwen/Qwen3-0.6B-GGUF:Q8_0); without one, the largest that fits this machine.",
    )
    p.add_argument("repo", metavar="REPO[:QUANT]")
    p.add_argument("--file", metavar="NAME", help="a file of the repository (instead of QUANT)")
    p.add_argument(
        "--dir", type=Path, metavar="DIR", help="where to put it (default: the library folder)"
    )
    p.add_argument(
        "--endpoint",
        metavar="URL",
        help="the Hub's address (default: HF_ENDPOINT, else the Hub address in Preferences, "
        "else huggingface.co)",
    )
    p.add_argument("--revision", default="main", help=argparse.SUPPRESS)
    p.set_defaults(func=cmd_pull)

    p = sub.add_parser(
        "models",
        help="list the model library",
        description="List the model library: file, size, quantization, architecture, "
        "whether each file fits this machine's memory, and where its layers would go on "
        "this machine's devices (and --rpc workers).",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    from app.cli_flags import add_device_args

    add_device_args(p, "devices (the plan shown for each model)")
    p.set_defaults(func=cmd_models)


def _fmt_size(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if n < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"


class _Printer:
    """A progress bar on a terminal; elsewhere a line every few seconds."""

    def __init__(self, every: float = 5.0) -> None:
        self.tty = sys.stderr.isatty()
        self.every = every
        self.last = 0.0

    def __call__(self, event: Any) -> None:
        from app.hub import events as ev

        if isinstance(event, ev.Progress):
            now = time.monotonic()
            if self.tty:
                if now - self.last < 0.1 and event.done < event.total:
                    return
                self.last = now
                frac = event.done / event.total if event.total else 0.0
                bar = "#" * int(frac * 30)
                eta = f" ETA {event.eta:.0f}s" if event.eta else ""
                sys.stderr.write(
                    f"\r[{bar:<30}] {frac * 100:5.1f}% {_fmt_size(event.done)}/"
                    f"{_fmt_size(event.total)} {_fmt_size(event.speed)}/s{eta}   "
                )
                sys.stderr.flush()
            elif now - self.last >= self.every:
                self.last = now
                print(
                    f"llamadesk: {_fmt_size(event.done)} of {_fmt_size(event.total)} "
                    f"({_fmt_size(event.speed)}/s)",
                    file=sys.stderr,
                )
        elif isinstance(event, ev.Retrying):
            self._end_line()
            print(
                f"llamadesk: {event.reason} (retry {event.attempt} in {event.delay:.0f} s)",
                file=sys.stderr,
            )
        elif isinstance(event, ev.Verified):
            self._end_line()
            what = "SHA-256 checked" if event.checked else "size checked (no SHA-256 published)"
            print(f"llamadesk: {event.filename}: {what}", file=sys.stderr)
        elif isinstance(event, ev.Started) and event.done:
            print(
                f"llamadesk: resuming at {_fmt_size(event.done)} of {_fmt_size(event.total)}",
                file=sys.stderr,
            )

    def _end_line(self) -> None:
        if self.tty:
            sys.stderr.write("\n")


def _pick(args: argparse.Namespace, client: Any) -> tuple[str, Any]:
    from app.hub import fit

    repo, _, quant = args.repo.partition(":")
    if repo.count("/") != 1:
        raise LlamaDeskError(f"{args.repo!r} is not a repository name like owner/name[:QUANT].")
    details = client.details(repo, args.revision)
    if args.file:
        from app.hub.files import check_repo_path

        check_repo_path(args.file)
        found = details.find(filename=args.file)
        if not found:
            raise LlamaDeskError(f"{repo} has no GGUF file named {args.file}.")
        return repo, found[0]
    if quant:
        found = details.find(quant=quant)
        if not found:
            have = ", ".join(sorted(details.by_quant()))
            raise LlamaDeskError(f"{repo} has no {quant} file; it has: {have}.")
        return repo, found[0]
    entries = list(details.entries)
    sizes = [e.size for e in entries]
    best = fit.recommend(sizes, lambda i: fit.estimate(sizes[i], None))
    if best is None:
        best = min(range(len(entries)), key=lambda i: sizes[i])
    return repo, entries[best]


def cmd_pull(args: argparse.Namespace) -> int:
    from app.hub import config
    from app.hub.client import HubClient
    from app.hub.download import DownloadManager, DownloadRequest
    from app.hub.events import Finished

    client = HubClient(args.endpoint, token=config.TokenStore().get())
    repo, entry = _pick(args, client)
    print(
        f"llamadesk: {repo} {entry.name} ({entry.quant}, {_fmt_size(entry.size)})", file=sys.stderr
    )
    printer = _Printer()
    manager = DownloadManager(client, on_event=printer)
    dest = args.dir.expanduser().resolve() if args.dir else None
    job = manager.enqueue(DownloadRequest.of(repo, entry, args.revision, dest))
    finished: list[Finished] = []
    manager.subscribe(lambda e: finished.append(e) if isinstance(e, Finished) else None)
    try:
        status = manager.wait(job)
    except KeyboardInterrupt:
        manager.close()
        print("llamadesk: paused; run the same command again to resume", file=sys.stderr)
        raise
    manager.close()
    if status.state != "finished" or not finished:
        raise LlamaDeskError(status.message or "The download did not finish.")
    path = finished[0].path
    _add_to_library(path)
    print(path)
    return 0


def _read_metadata(path: Path) -> Any:
    from app.engine.metadata import read_model_info

    return read_model_info(path).to_dict()


def _add_to_library(path: Path) -> None:
    from app.storage import Database

    db = Database.open()
    try:
        db.add_model_file(path, _read_metadata)
    finally:
        db.close()


def cmd_models(args: argparse.Namespace) -> int:
    import json

    from app.hub import config, fit
    from app.storage import Database

    db = Database.open()
    try:
        library = str(config.library_dir())
        if library not in db.list_folders():
            db.add_folder(library)
        db.scan(_read_metadata)
        entries = db.list_models()
    finally:
        db.close()
    plan_for = _planner(args)
    rows: list[dict[str, Any]] = []
    for e in entries:
        meta = e.metadata or {}
        arch = str(meta.get("architecture") or "")
        verdict = ""
        if e.metadata is not None:
            from app.engine.metadata import ModelInfo

            verdict = fit.estimate(e.size, ModelInfo.from_dict(e.metadata)).verdict
        from app.hub.files import quantization

        quant = quantization(e.name)
        if quant == "unknown" and meta.get("file_type"):
            quant = str(meta["file_type"])
        rows.append(
            {
                "file": e.path,
                "size": e.size,
                "quantization": quant,
                "architecture": arch,
                "fit": verdict,
                "plan": plan_for(e.path) if e.metadata is not None else None,
                "error": e.error,
            }
        )
    if args.json:
        print(json.dumps({"models": rows}, indent=2))
        return 0
    if not rows:
        print("No models in the library; get one with: llamadesk pull REPO[:QUANT]")
        return 0
    print(f"{'FILE':<44} {'SIZE':>9} {'QUANT':<8} {'ARCH':<10} FIT")
    for r in rows:
        name = Path(str(r["file"])).name
        fit_text = r["fit"] or f"unreadable: {r['error']}"
        print(
            f"{name:<44} {_fmt_size(int(r['size'])):>9} {r['quantization']:<8} "
            f"{r['architecture']:<10} {fit_text}"
        )
        if r["plan"]:
            print(f"{'':<4}{r['plan']}")
    return 0


def _planner(args: argparse.Namespace) -> Any:
    """The plan of a model file in words ("22 of 28 layers on CUDA0 (...), 6 on the CPU;
    4 tabs of 8k"), with the device flags; the --rpc workers are asked once."""
    from app.engine import ContextSettings
    from app.engine.offload_preview import preview, remote_devices
    from app.engine_cli import model_settings
    from app.errors import LlamaDeskError

    settings = model_settings(args)
    remote, problems = remote_devices(settings.rpc_servers)
    for problem in problems:
        print(f"llamadesk: warning: {problem}", file=sys.stderr)

    def plan_for(path: str) -> str | None:
        try:
            return preview(path, settings, ContextSettings(), remote).text
        except (LlamaDeskError, OSError) as exc:
            return f"no plan: {exc}"

    return plan_for
