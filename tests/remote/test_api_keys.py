"""Remote engines' API keys without a system keyring (issue 27 item 6): kept as the MCP
secrets and the Hub token are, in an owner-only file of the data folder (never in
``settings.json``), so they survive a restart."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from app import paths
from app.remote.saved import KEYS_FILE, ApiKeys

pytestmark = pytest.mark.skipif(os.name == "nt", reason="POSIX permission bits")


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("LLAMADESK_HOME", str(tmp_path / "data"))
    return paths.data_dir()


def test_a_key_survives_a_restart_in_an_owner_only_file(home: Path) -> None:
    keys = ApiKeys(use_keyring=False)
    assert keys.get("gpu-box") is None
    keys.set("gpu-box", "sk-one")
    keys.set("other", "sk-two")
    path = home / KEYS_FILE
    assert keys.path == path and str(path) in keys.where() and keys.persistent
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    restarted = ApiKeys(use_keyring=False)  # a new process reads the file
    assert restarted.get("gpu-box") == "sk-one" and restarted.get("other") == "sk-two"
    restarted.delete("gpu-box")
    assert ApiKeys(use_keyring=False).get("gpu-box") is None
    assert json.loads(path.read_text(encoding="utf-8")) == {"other": "sk-two"}
    assert not (home / "settings.json").exists() or "sk-" not in (home / "settings.json").read_text(
        encoding="utf-8"
    )


def test_a_damaged_keys_file_loses_nothing_else(home: Path) -> None:
    path = home / KEYS_FILE
    path.write_text("{not json", encoding="utf-8")
    keys = ApiKeys(use_keyring=False)
    assert keys.get("gpu-box") is None  # unreadable: no key, no exception
    keys.set("gpu-box", "sk-new")
    assert keys.get("gpu-box") == "sk-new"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
