"""Which MCP tools each conversation has on (Qt-free): ``chat-tools.json`` in the data
folder, conversation id -> the (server, tool) pairs switched on.

A conversation starts with none: tools cost context and every call asks, so a chat gets
them only when its user picks them. A pair whose server or tool is gone is simply not
offered (it comes back with its server). The file is small and written whole, atomically.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from pathlib import Path
from typing import Final

from app import paths
from app.fsutil import atomic_write_bytes

__all__ = ["ToolSelection", "selection_path"]

log = logging.getLogger(__name__)

_VERSION: Final = 1

Pair = tuple[str, str]


def selection_path() -> Path:
    return paths.data_dir() / "chat-tools.json"


class ToolSelection:
    """The pairs switched on per conversation (read at first use, written on change)."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = self._path = path or selection_path()
        self._chats: dict[int, set[Pair]] | None = None

    def _load(self) -> dict[int, set[Pair]]:
        if self._chats is not None:
            return self._chats
        chats: dict[int, set[Pair]] = {}
        try:
            data = json.loads(self._path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            data = {}
        except (OSError, ValueError) as exc:  # a broken file: no tools on, said in the log
            log.warning("the chats' tool choices in %s cannot be read: %s", self._path, exc)
            data = {}
        raw = data.get("chats", {}) if isinstance(data, dict) else {}
        for key, pairs in raw.items() if isinstance(raw, dict) else ():
            if not key.isdigit() or not isinstance(pairs, list):
                continue
            chats[int(key)] = {
                (p[0], p[1])
                for p in pairs
                if isinstance(p, list) and len(p) == 2 and all(isinstance(x, str) for x in p)
            }
        self._chats = chats
        return chats

    def enabled(self, conversation_id: int) -> set[Pair]:
        return set(self._load().get(conversation_id, set()))

    def set_enabled(self, conversation_id: int, pairs: Iterable[Pair]) -> str:
        """Keep the choice; a sentence when it could not be saved ("" when it was)."""
        chats = self._load()
        chosen = set(pairs)
        if chosen:
            chats[conversation_id] = chosen
        else:
            chats.pop(conversation_id, None)
        data = {
            "version": _VERSION,
            "chats": {str(cid): sorted([list(p) for p in pairs]) for cid, pairs in chats.items()},
        }
        try:
            atomic_write_bytes(self._path, json.dumps(data, indent=1).encode("utf-8"))
        except OSError as exc:
            return (
                f"The chat's tool choice could not be saved in {self._path}: {exc.strerror or exc}."
            )
        return ""
