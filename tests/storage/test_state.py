"""KV state files: atomic writes, LRU quota, never an exception for a missing file."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from app import paths
from app.storage import StateStore


def _age(path: Path, seconds_ago: float) -> None:
    t = path.stat().st_mtime - seconds_ago
    os.utime(path, (t, t))


def test_put_get_round_trip_in_data_dir(home: Path) -> None:
    store = StateStore()
    assert store.directory == paths.state_dir() and store.quota_bytes == 4 * 1024**3
    path = store.put(7, "llama-q4-abc123", b"\x00state" * 100)
    assert path == store.path_for(7, "llama-q4-abc123") and path is not None
    assert path.parent == home / "states" and path.name == "7-llama-q4-abc123.kvstate"
    assert store.get(7, "llama-q4-abc123") == b"\x00state" * 100
    assert store.put(7, "llama-q4-abc123", b"new") == path
    assert store.get(7, "llama-q4-abc123") == b"new"
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temp files left
    assert store.total_bytes() == 3


def test_odd_fingerprints_make_safe_names(tmp_path: Path) -> None:
    store = StateStore(tmp_path)
    for fp in ["../../etc/passwd", "a/b", "with space", "x" * 300, "ünï", "", ".hidden"]:
        p = store.path_for(1, fp)
        assert p.parent == tmp_path and "/" not in p.name[:-8] and not p.name.startswith(".")
        store.put(1, fp, fp.encode())
        assert store.get(1, fp) == fp.encode()
    assert store.path_for(1, "a/b") != store.path_for(1, "a_b")


def test_missing_or_unreadable_is_none_with_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = StateStore(tmp_path)
    with caplog.at_level(logging.INFO, logger="app.storage.state"):
        assert store.get(1, "fp") is None
    store.path_for(2, "fp").mkdir()  # a directory where the file should be: unreadable
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="app.storage.state"):
        assert store.get(2, "fp") is None
    assert any("Could not read" in r.message for r in caplog.records)


def test_failed_write_returns_none_and_keeps_old(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = StateStore(tmp_path)
    store.put(1, "fp", b"old")
    bad = StateStore(tmp_path)
    bad.directory = tmp_path / "file-not-dir"
    bad.directory.write_text("x")
    with caplog.at_level(logging.WARNING, logger="app.storage.state"):
        assert bad.put(1, "fp", b"new") is None
    assert store.get(1, "fp") == b"old"


def test_quota_evicts_least_recently_used_never_the_new_one(tmp_path: Path) -> None:
    store = StateStore(tmp_path, quota_bytes=300)
    for cid in (1, 2, 3):
        store.put(cid, "fp", bytes(100))
    _age(store.path_for(1, "fp"), 300)
    _age(store.path_for(2, "fp"), 200)
    _age(store.path_for(3, "fp"), 100)
    assert store.get(1, "fp") is not None  # touched: now the most recently used
    store.put(4, "fp", bytes(100))
    assert store.get(2, "fp") is None  # the least recently used went
    assert {p.name for p in tmp_path.iterdir()} == {"1-fp.kvstate", "3-fp.kvstate", "4-fp.kvstate"}
    assert store.total_bytes() == 300
    store.put(5, "fp", bytes(1000))  # bigger than the quota: everything else goes, it stays
    assert [p.name for p in tmp_path.iterdir()] == ["5-fp.kvstate"]


def test_delete_all_fingerprints_of_a_conversation(tmp_path: Path) -> None:
    store = StateStore(tmp_path)
    store.put(1, "a", b"1")
    store.put(1, "b", b"2")
    store.put(11, "a", b"3")
    assert store.delete(1) == 2
    assert store.get(11, "a") == b"3" and store.delete(1) == 0
    store.discard(11, "a")
    assert store.total_bytes() == 0


def test_stale_temp_files_are_cleaned(tmp_path: Path) -> None:
    stale = tmp_path / ".tmp-1-fp.kvstate.abc"
    stale.write_bytes(b"half written")
    os.utime(stale, (0, 0))
    fresh = tmp_path / ".tmp-2-fp.kvstate.def"
    fresh.write_bytes(b"being written now")
    StateStore(tmp_path)
    assert not stale.exists() and fresh.exists()
