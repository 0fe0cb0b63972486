"""``llamadesk export``, ``llamadesk import`` and ``llamadesk chats``."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

# The commands import the storage layer when they run: ``register`` is called for every
# ``llamadesk`` command line, ``run`` and ``serve`` included, which should not pay for it.


def register(sub: Any) -> None:
    """Add the storage subcommands to ``argparse`` subparsers."""
    p = sub.add_parser(
        "export",
        help="export conversations to Markdown or JSON",
        description="Export one or all conversations. JSON keeps everything (all branches, "
        "settings) and can be imported again; Markdown is for reading.",
    )
    p.add_argument("conversation_id", nargs="?", type=int, metavar="CONVERSATION_ID")
    p.add_argument("--all", action="store_true", help="export every conversation")
    p.add_argument("--format", choices=("md", "json"), help="default: from -o's suffix, else json")
    p.add_argument("-o", "--output", type=Path, metavar="FILE", help="write here instead of stdout")
    p.set_defaults(func=cmd_export)

    p = sub.add_parser(
        "import",
        help="import conversations from a JSON export",
        description="Import every conversation of a JSON export as new conversations; "
        "the file is checked first and nothing is imported if anything is invalid.",
    )
    p.add_argument("file", type=Path, metavar="FILE")
    p.set_defaults(func=cmd_import)

    p = sub.add_parser("chats", help="list conversations, or search them")
    p.add_argument("--search", metavar="TEXT", help="full-text search over all messages")
    p.add_argument("--archived", action="store_true", help="include archived conversations")
    p.add_argument("--limit", type=int, default=50, help="maximum search hits (default 50)")
    p.set_defaults(func=cmd_chats)


def _when(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(t))


def _one_line(text: str) -> str:
    return " ".join(text.split())


def cmd_export(args: argparse.Namespace) -> int:
    from app.fsutil import atomic_write_bytes
    from app.storage import export as exporter
    from app.storage.database import Database
    from app.storage.errors import StorageError

    if args.all == (args.conversation_id is not None):
        raise StorageError("Give either a conversation id or --all to choose what to export.")
    fmt = args.format
    if fmt is None:
        fmt = (
            "md"
            if args.output is not None and args.output.suffix.lower() in (".md", ".markdown")
            else "json"
        )
    ids = None if args.all else [args.conversation_id]
    with Database.open() as db:
        text = (
            exporter.dumps(exporter.export_json(db, ids))
            if fmt == "json"
            else exporter.export_markdown(db, ids)
        )
    if args.output is None:
        sys.stdout.write(text)
        sys.stdout.flush()
        return 0
    try:
        atomic_write_bytes(Path(args.output), text.encode("utf-8"))
    except OSError as exc:
        raise StorageError(
            f"Could not write {args.output} ({exc.strerror or exc}); choose another file."
        ) from exc
    return 0


def cmd_import(args: argparse.Namespace) -> int:
    from app.storage import export as exporter
    from app.storage.database import Database

    data = exporter.read_json_file(args.file)
    with Database.open() as db:
        ids = exporter.import_json(db, data)
    noun = "conversation" if len(ids) == 1 else "conversations"
    listed = (": " + ", ".join(str(i) for i in ids)) if ids else ""
    print(f"Imported {len(ids)} {noun}{listed}.")
    return 0


def cmd_chats(args: argparse.Namespace) -> int:
    from app.storage.database import Database

    with Database.open() as db:
        if args.search is not None:
            hits = db.search(args.search, limit=max(1, args.limit))
            for hit in hits:
                print(
                    f"{hit.conversation_id}\t{hit.message_id}\t{_one_line(hit.title)}\t{_one_line(hit.snippet)}"
                )
            if not hits:
                print("No messages match.", file=sys.stderr)
            return 0
        conversations = db.list_conversations(include_archived=args.archived)
    if not conversations:
        print("No conversations yet.", file=sys.stderr)
    for c in conversations:
        marks = ("*" if c.pinned else " ") + ("A" if c.archived else " ")
        print(
            f"{c.id}\t{_when(c.updated_at)}\t{marks}\t{_one_line(c.title)}\t{c.message_count} messages"
        )
    return 0
