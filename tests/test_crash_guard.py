"""A native crash is never silent (issue 27, item 1c): ``run`` and ``serve`` say which
model crashed llama.cpp and while doing what; the window's next start finds the record.

The crash is real: ``LLAMADESK_FAULT_DECODE_CRASH=1`` makes every ``llama_decode`` of the
app's context die of SIGSEGV (as llama.cpp's AMX kernels did), in a real child process.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from app import crash_record, crash_supervisor
from app.engine import load_check
from app.engine.context import FAULT_DECODE_ENV
from tests.support.serve_process import ServeProcess

ROOT = Path(__file__).resolve().parents[1]


def _env(home: Path, **extra: str) -> dict[str, str]:
    env = dict(os.environ, LLAMADESK_HOME=str(home), PYTHONPATH=str(ROOT), **extra)
    env.pop(crash_supervisor.DISABLE_ENV, None)
    return env


def test_run_says_which_model_crashed_while_decoding(tiny_model: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    done = subprocess.run(
        [sys.executable, "-m", "app", "run", str(tiny_model), "Hello", "-n", "4"],
        cwd=ROOT,
        env=_env(home, **{FAULT_DECODE_ENV: "1"}),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 128 + signal.SIGSEGV, done.stderr[-2000:]
    assert done.stderr.strip().splitlines()[-1] == (
        f"llamadesk: llama.cpp crashed (SIGSEGV) while decoding with the model "
        f"{tiny_model.name}; `llamadesk run` stopped. {tiny_model.name} loads without "
        "llama.cpp's faster CPU kernels from now on."
    )
    assert list((home / crash_record.FOLDER).glob("*.json")) == []  # read and removed
    # The verdict is kept: the next run (no crash now) goes the safe way and says so.
    again = subprocess.run(
        [sys.executable, "-m", "app", "run", str(tiny_model), "Hello", "-n", "4"],
        cwd=ROOT,
        env=_env(home),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert again.returncode == 0, again.stderr[-2000:]
    notice = load_check.CRASHED_NOTICE.format(name=tiny_model.name)
    assert f"llamadesk: warning: {notice}" in again.stderr.splitlines()


def test_run_without_a_crash_is_unchanged(tiny_model: Path, tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "app", "run", str(tiny_model), "Hello", "-n", "4", "--json"],
        cwd=ROOT,
        env=_env(tmp_path / "home"),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert '"results"' in done.stdout and "crashed" not in done.stderr


def test_serve_says_which_model_crashed(tiny_model: Path, tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "app", "serve", "--port", "0", str(tiny_model)],
        cwd=ROOT,
        env=_env(tmp_path / "home", **{FAULT_DECODE_ENV: "1"}),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 139, err[-2000:]
    # The context's first decodes (its batching measure) come right after the load.
    assert err.strip().splitlines()[-1] == (
        f"llamadesk: llama.cpp crashed (SIGSEGV) while decoding with the model "
        f"{tiny_model.name}; `llamadesk serve` stopped. {tiny_model.name} loads without "
        "llama.cpp's faster CPU kernels from now on."
    )


def _children(pid: int) -> list[int]:
    text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    return [int(p) for p in text.split()]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the supervisor forks on Linux")
def test_serve_stops_on_sigterm_and_dies_with_a_killed_parent(
    tiny_model: Path, tmp_path: Path
) -> None:
    # SIGTERM to the process a service manager knows reaches the server: a clean stop.
    server = ServeProcess([str(tiny_model)], tmp_path / "home")
    (child,) = _children(server.proc.pid)
    assert server.server_pid == child != server.proc.pid
    code, err = server.stop()
    assert code == 0, err[-2000:]
    assert "stopping" in err and "crashed" not in err
    with pytest.raises(ProcessLookupError):
        os.kill(child, 0)
    # kill -9 of it ends the server too (as it did when it was one process).
    server = ServeProcess([str(tiny_model)], tmp_path / "home")
    (child,) = _children(server.proc.pid)
    with urllib.request.urlopen(server.url + "/health", timeout=10) as reply:
        assert reply.status == 200
    server.proc.kill()
    server.proc.communicate(timeout=30)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        pytest.fail("the server child outlived its killed parent")


# -- the record -------------------------------------------------------------------------


def test_the_record_names_the_model_and_the_phase(tmp_path: Path) -> None:
    assert crash_record.read("cli-1") is None
    crash_record.install("cli-1")
    try:
        crash_record.mark(crash_record.Phase.LOADING, "/models/a.gguf")
        record = crash_record.read("cli-1")
        assert record == crash_record.CrashRecord(
            "/models/a.gguf", crash_record.Phase.LOADING, os.getpid()
        )
        assert record.doing == "loading the model a.gguf"
        crash_record.mark(crash_record.Phase.DECODING, "/models/a.gguf")
        assert crash_record.read("cli-1") == crash_record.CrashRecord(
            "/models/a.gguf", crash_record.Phase.DECODING, os.getpid()
        )
        crash_record.clear("/models/b.gguf")  # another model closed: still running
        assert crash_record.read("cli-1") is not None
        crash_record.clear("/models/a.gguf")
        assert crash_record.read("cli-1") is None
    finally:
        crash_record.clear()
        crash_record.install(None)


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_only_a_dead_window_with_a_fault_file_crashed(tmp_path: Path) -> None:
    folder = crash_record.folder()
    folder.mkdir(parents=True)
    dead = _dead_pid()
    record = f'{{"model": "/m/x.gguf", "phase": "decoding", "pid": {dead}}}'
    crash_record.record_path(crash_record.WINDOW).write_text(record)
    # A record alone: the window was killed or the computer stopped, not a crash.
    assert crash_record.last_window_crash() is None
    (folder / f"window-{dead}.fault").write_text("Fatal Python error: Segmentation fault\n")
    found = crash_record.last_window_crash()
    assert found == crash_record.CrashRecord("/m/x.gguf", crash_record.Phase.DECODING, dead)
    # A window still running (this process stands in for it) did not crash.
    alive = record.replace(str(dead), str(os.getppid()))
    crash_record.record_path(crash_record.WINDOW).write_text(alive)
    assert crash_record.last_window_crash() is None


def test_run_and_serve_say_when_the_slower_path_was_chosen(
    tiny_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first-load check's child crashes with extra buffer types (the fault switch
    stands in for the AMX crash): both commands work, and say how on stderr."""
    from app.engine.load_check import FAULT_ENV

    notice = (
        f"llamadesk: warning: {tiny_model.name} crashed llama.cpp with its faster CPU kernels "
        "on this computer, so it runs without them (as llama-server's --no-repack), which "
        "may be slower."
    )
    done = subprocess.run(
        [sys.executable, "-m", "app", "run", str(tiny_model), "Hello", "-n", "4"],
        cwd=ROOT,
        env=_env(tmp_path / "run-home", **{FAULT_ENV: "1"}),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert notice in done.stderr.splitlines()
    monkeypatch.setenv(FAULT_ENV, "1")
    server = ServeProcess([str(tiny_model)], tmp_path / "serve-home")
    code, err = server.stop()
    assert code == 0 and notice in err.splitlines(), err[-2000:]
