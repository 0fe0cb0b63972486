"""Where LlamaDesk keeps its files.

One data folder holds the database, the settings file and the KV state files.
``LLAMADESK_HOME`` overrides it (the tests point it at a temporary folder). The folders made
here are created owner-only (``0700``): conversations and keys are nobody else's business.
"""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs

from app.fsutil import make_private_dir

APP_NAME = "LlamaDesk"
RESOURCES = Path(__file__).resolve().parent.parent / "resources"


def data_dir() -> Path:
    """The data folder, created (owner-only) on first use."""
    home = os.environ.get("LLAMADESK_HOME")
    path = Path(home).expanduser() if home else Path(platformdirs.user_data_dir(APP_NAME, False))
    return make_private_dir(path)


def database_path() -> Path:
    return data_dir() / "llamadesk.sqlite3"


def settings_path() -> Path:
    return data_dir() / "settings.json"


def state_dir() -> Path:
    return make_private_dir(data_dir() / "states")


def resources_dir() -> Path:
    """Bundled resources (the demo model, icons); inside a PyInstaller bundle too."""
    import sys

    frozen_root = getattr(sys, "_MEIPASS", None)
    if frozen_root:
        return Path(frozen_root) / "resources"
    return RESOURCES


def demo_model_path() -> Path:
    return resources_dir() / "models" / "llamadesk-demo.gguf"
