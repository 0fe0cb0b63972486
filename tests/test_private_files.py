"""Owner-only files (issue 27 item 6): the data folder and the app's folders in it are
0700, its files 0600 - as written by every writer, and when an older version left them
readable (tightened at start); never the user's home or a temp root."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from app import paths
from app.engine import cpu_quirks, load_check
from app.fsutil import atomic_write_bytes, is_shared_root, make_private_dir, tighten_tree
from app.hub import config as hub_config
from app.mcp.approval import ApprovalPolicy
from app.mcp.config import StdioServer
from app.storage.state import StateStore

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(os.name == "nt", reason="POSIX permission bits")


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "data"
    monkeypatch.setenv("LLAMADESK_HOME", str(folder))
    return folder


def _loose_data_folder(folder: Path) -> dict[str, Path]:
    """What an older version left: everything group- and world-readable."""
    made = {
        "permissions": folder / "tool-permissions.json",
        "quirks": folder / "cpu_quirks.json",
        "secrets": folder / "mcp-secrets.json",
        "check": folder / "load_checks" / "abc.json",
        "state": folder / "states" / "1-abcd.llstate",
        "slot": folder / "states" / "slots" / "mine.bin",
        "part": folder / "downloads" / "org" / "repo" / "model.gguf.part",
        "model": folder / "models" / "model.gguf",
    }
    for path in made.values():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("x", encoding="utf-8")
        path.chmod(0o644)
    for path in [folder, *{p.parent for p in made.values()}, folder / "downloads" / "org"]:
        path.chmod(0o755)
    return made


def test_a_pre_existing_data_folder_is_tightened_at_start(tmp_path: Path) -> None:
    folder = tmp_path / "data"
    made = _loose_data_folder(folder)
    outside = tmp_path / "outside.txt"
    outside.write_text("not ours", encoding="utf-8")
    outside.chmod(0o644)
    (folder / "states" / "link").symlink_to(outside)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "LLAMADESK_HOME": str(folder)}
    subprocess.run(
        [sys.executable, "-c", "from app import paths; paths.data_dir()"],
        check=True,
        env=env,
        timeout=60,
    )
    assert mode(folder) == 0o700
    for name in ("load_checks", "states", "states/slots", "downloads", "downloads/org/repo"):
        assert mode(folder / name) == 0o700, name
    for key in ("permissions", "quirks", "secrets", "check", "state", "slot", "part"):
        assert mode(made[key]) == 0o600, key
    assert mode(made["model"]) == 0o644  # a model file is not secret
    assert mode(outside) == 0o644  # a link is not followed


def test_the_user_s_home_and_temp_roots_are_never_changed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_home = tmp_path / "user"
    fake_home.mkdir(mode=0o755)
    fake_home.chmod(0o755)
    notes = fake_home / "notes.txt"
    notes.write_text("mine", encoding="utf-8")
    notes.chmod(0o644)
    monkeypatch.setenv("HOME", str(fake_home))
    monkeypatch.setenv("LLAMADESK_HOME", str(fake_home))
    paths._tightened.discard(fake_home)
    assert paths.data_dir() == fake_home
    assert mode(fake_home) == 0o755 and mode(notes) == 0o644
    assert not (fake_home / paths.TIGHTENED_MARKER).exists()
    assert is_shared_root(fake_home) and is_shared_root(tmp_path.parent.parent.parent)
    assert is_shared_root(Path(tempfile.gettempdir())) and is_shared_root(Path("/"))
    assert not is_shared_root(fake_home / "LlamaDesk")
    assert tighten_tree(Path(tempfile.gettempdir()), {"states"}) == 0


def test_every_writer_makes_owner_only_files(home: Path) -> None:
    server = StdioServer("s", "server", ("--token", "t0ps3cret"))
    permissions = paths.data_dir() / "tool-permissions.json"
    permissions.write_text("{}", encoding="utf-8")
    permissions.chmod(0o644)
    ApprovalPolicy().allow_always(server, "echo")
    assert mode(permissions) == 0o600 and "t0ps3cret" in permissions.read_text()

    identity = cpu_quirks.CpuIdentity("test cpu", ("amx_int8",), "0")
    cpu_quirks.forget_verdicts()
    try:
        cpu_quirks.amx_verdict(identity, probe=lambda: cpu_quirks.Verdict.WORKS)
    finally:
        cpu_quirks.forget_verdicts()
    assert mode(home / cpu_quirks.VERDICT_FILE) == 0o600

    load_check._write_cached("k", load_check.Verdict(True, "", "child"), Path("m.gguf"))
    assert mode(home / "load_checks") == 0o700 and mode(home / "load_checks" / "k.json") == 0o600

    assert mode(hub_config.downloads_dir()) == 0o700
    store = StateStore()
    assert mode(store.directory) == 0o700
    written = store.put(1, "fingerprint", b"state")
    assert written is not None and mode(written) == 0o600

    nested = home / "a" / "b" / "c.json"
    atomic_write_bytes(nested, b"{}")
    assert mode(home / "a" / "b") == 0o700 and mode(nested) == 0o600


def test_an_app_folder_left_open_is_tightened_when_used(home: Path) -> None:
    slots = make_private_dir(paths.data_dir() / "states" / "slots")
    slots.chmod(0o755)
    assert mode(make_private_dir(slots, tighten=True)) == 0o700
    user_folder = home / "export-here"
    user_folder.mkdir(mode=0o755)
    user_folder.chmod(0o755)
    atomic_write_bytes(user_folder / "chat.md", b"hello")  # the user's own folder keeps its mode
    assert mode(user_folder) == 0o755 and mode(user_folder / "chat.md") == 0o600


def test_tightening_ten_thousand_state_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The start-up cost on a data folder of 10,000 loose state files: the first start
    walks it, later starts find the marker (printed: run with -s)."""
    folder = tmp_path / "data"
    states = folder / "states"
    states.mkdir(parents=True)
    for i in range(10_000):
        (states / f"{i}-abcd.llstate").write_bytes(b"")
    for path in states.iterdir():
        path.chmod(0o644)
    monkeypatch.setenv("LLAMADESK_HOME", str(folder))
    timings = []
    for _ in range(2):
        paths._tightened.discard(folder)  # as a new process would
        started = time.perf_counter()
        paths.data_dir()
        timings.append(time.perf_counter() - started)
    assert all(mode(p) == 0o600 for p in states.iterdir())
    assert mode(folder / paths.TIGHTENED_MARKER) == 0o600
    walk_started = time.perf_counter()
    assert tighten_tree(folder, paths.PRIVATE_FOLDERS) == 0  # nothing left to change
    walk_s = time.perf_counter() - walk_started
    print(
        json.dumps(
            {
                "entries": 10_000,
                "first_start_s": round(timings[0], 4),
                "later_starts_s": round(timings[1], 4),
                "walk_when_tight_s": round(walk_s, 4),
            }
        )
    )
