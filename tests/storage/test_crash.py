"""Crash test: SIGKILL a process that writes conversations and streams replies, at 50
random (seeded) moments; after each kill the database must be intact and every committed
message must be there as committed."""

from __future__ import annotations

import hashlib
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from app.storage import Database

from .crash_child import reply_text

CHILD = Path(__file__).with_name("crash_child.py")
KILLS = 50


@dataclass
class Expected:
    conversations: set[int] = field(default_factory=set)
    users: dict[int, str] = field(default_factory=dict)  # id -> sha256
    replies: dict[int, int] = field(default_factory=dict)  # id -> committed length
    finished: dict[int, tuple[int, str]] = field(default_factory=dict)
    forks: dict[int, list[int]] = field(default_factory=dict)
    commits: int = 0

    def read_log(self, text: str) -> None:
        for line in text.splitlines():
            kind, *rest = line.split()
            if kind == "READY":
                continue
            self.commits += 1
            if kind == "C":
                self.conversations.add(int(rest[0]))
            elif kind == "U":
                self.users[int(rest[0])] = rest[2]
            elif kind == "R":
                self.replies.setdefault(int(rest[0]), 0)
            elif kind == "P":
                mid, n = int(rest[0]), int(rest[1])
                self.replies[mid] = max(self.replies.get(mid, 0), n)
            elif kind == "F":
                self.finished[int(rest[0])] = (int(rest[1]), rest[2])
            elif kind == "K":
                self.forks[int(rest[0])] = [int(x) for x in rest[1].split(",")]


def _verify(path: Path, expected: Expected) -> None:
    raw = sqlite3.connect(path)
    assert raw.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    raw.close()
    with Database.open(path, check=True) as db:  # opens as the app does: no repair step
        convs = {c.id for c in db.list_conversations(include_archived=True)}
        assert expected.conversations <= convs
        rows = {row["id"]: row for row in db._all("SELECT id, content, status FROM messages")}
        for mid, sha in expected.users.items():
            assert hashlib.sha256(rows[mid]["content"].encode()).hexdigest() == sha
            assert rows[mid]["status"] == "complete"
        for mid, committed in expected.replies.items():
            content, status = rows[mid]["content"], rows[mid]["status"]
            full = reply_text(mid)
            assert len(content) >= committed, f"reply {mid} lost committed text"
            assert full.startswith(content), f"reply {mid} is not a prefix of its stream"
            if mid in expected.finished:
                n, final_status = expected.finished[mid]
                assert (content, status) == (full[:n], final_status)
            else:
                assert status in ("partial", "complete", "stopped")  # finish may be unlogged
        for cid, ids in expected.forks.items():  # the copied thread, intact (it may grow)
            assert [m.id for m in db.get_thread(cid, ids[-1])] == ids
        assert db.search("llama", limit=5) is not None


@pytest.mark.slow
def test_sigkill_at_random_moments_loses_nothing_committed(tmp_path: Path) -> None:
    path = tmp_path / "crash.sqlite3"
    log = tmp_path / "child.log"
    expected = Expected()
    rng = random.Random(20240601)
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    for i in range(KILLS):
        log.write_bytes(b"")
        child = subprocess.Popen(
            [sys.executable, str(CHILD), str(path), str(log), str(i)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        deadline = time.monotonic() + 30
        while b"READY" not in log.read_bytes():  # kill while it writes, not while it imports
            assert child.poll() is None, child.stderr.read().decode() if child.stderr else ""
            assert time.monotonic() < deadline, "child did not start"
            time.sleep(0.01)
        time.sleep(rng.uniform(0.0, 0.6))
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        assert child.returncode == -signal.SIGKILL, (
            child.stderr.read().decode() if child.stderr else ""
        )
        if child.stderr:
            child.stderr.close()
        expected.read_log(log.read_text("utf-8"))
        _verify(path, expected)
    # The kills really happened mid-work: plenty of commits and unfinished replies.
    assert expected.commits > 500
    assert len(expected.replies) > len(expected.finished)
