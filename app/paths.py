"""Where LlamaDesk keeps its files.

One data folder holds the database, the settings file and the KV state files.
``LLAMADESK_HOME`` overrides it (the tests point it at a temporary folder). The data folder
and the app's folders in it are owner-only (``0700``), its files ``0600``: conversations,
keys and the tool permissions are nobody else's business. A data folder that exists
already (an older version's, or one the user made) is tightened once
(:func:`app.fsutil.tighten_tree`, then a marker file says it was done: every writer makes
owner-only files since), except where it is the user's home or a temp root. Measured on
10,000 state files (tests/test_private_files.py): see the test's printed numbers.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import platformdirs

from app.fsutil import create_private_file, is_shared_root, make_private_dir, tighten_tree

APP_NAME = "LlamaDesk"
RESOURCES = Path(__file__).resolve().parent.parent / "resources"

# The app's own folders in the data folder, tightened with everything in them. The model
# library ("models") is not among them: model files are not secret (and may be large).
PRIVATE_FOLDERS = frozenset({"states", "load_checks", "downloads", "rpc-cache"})

TIGHTENED_MARKER = ".owner-only"  # the data folder's files were made owner-only once
_tightened: set[Path] = set()
_tighten_lock = threading.Lock()


def data_dir() -> Path:
    """The data folder, created (owner-only) on first use; an existing one is tightened
    once a process (see the module docstring)."""
    home = os.environ.get("LLAMADESK_HOME")
    path = Path(home).expanduser() if home else Path(platformdirs.user_data_dir(APP_NAME, False))
    with _tighten_lock:
        if path not in _tightened:
            make_private_dir(path, tighten=True)
            marker = path / TIGHTENED_MARKER
            if not is_shared_root(path) and not marker.exists():
                tighten_tree(path, PRIVATE_FOLDERS)
                try:
                    create_private_file(marker)
                except OSError:  # a read-only data folder: tighten again next start
                    pass
            _tightened.add(path)
            return path
    return make_private_dir(path)


def private_dir(*parts: str) -> Path:
    """A folder of the app's in the data folder (``private_dir("states", "slots")``),
    created or tightened owner-only."""
    return make_private_dir(data_dir().joinpath(*parts), tighten=True)


def database_path() -> Path:
    return data_dir() / "llamadesk.sqlite3"


def settings_path() -> Path:
    return data_dir() / "settings.json"


def state_dir() -> Path:
    return private_dir("states")


def resources_dir() -> Path:
    """Bundled resources (the demo model, icons); inside a PyInstaller bundle too."""
    import sys

    frozen_root = getattr(sys, "_MEIPASS", None)
    if frozen_root:
        return Path(frozen_root) / "resources"
    return RESOURCES


def demo_model_path() -> Path:
    return resources_dir() / "models" / "llamadesk-demo.gguf"
