"""Where a "choose a GGUF file" dialog starts: :func:`start_folder`, and
:func:`remember_folder` for the next dialog (kept in the data folder's ui-state.json)."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

from app import paths
from app.fsutil import atomic_write_bytes

__all__ = ["remember_folder", "start_folder"]

log = logging.getLogger(__name__)


def _ui_state_file() -> Path:
    return paths.data_dir() / "ui-state.json"


def start_folder() -> Path:
    """Where a "choose a GGUF file" dialog starts: the last folder used, else the folder
    downloads land in (the library folder) when it holds models, else ~/Downloads, else ~."""
    try:
        data = json.loads(_ui_state_file().read_text(encoding="utf-8"))
        last = data.get("last_model_folder") if isinstance(data, dict) else None
    except (OSError, ValueError):
        last = None
    if isinstance(last, str) and os.path.isdir(last):
        return Path(last)
    library = paths.data_dir() / "models"
    if library.is_dir() and any(library.glob("*.gguf")):
        return library
    downloads = Path.home() / "Downloads"
    return downloads if downloads.is_dir() else Path.home()


def remember_folder(folder: str | Path) -> None:
    """Remember the folder a model file was chosen from (for the next dialog)."""
    target = _ui_state_file()
    try:
        data = json.loads(target.read_text(encoding="utf-8"))
        if not isinstance(data, dict):
            data = {}
    except (OSError, ValueError):
        data = {}
    data["last_model_folder"] = str(folder)
    try:
        atomic_write_bytes(target, json.dumps(data).encode("utf-8"))
    except OSError as exc:
        log.info("the last folder is not remembered: %s", exc)
