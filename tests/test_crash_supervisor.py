"""The crash supervisor's parent, with a real forked child that dies of a real signal:
what it says, and that it blames llama.cpp only when the child's record says it was in
llama.cpp (issue 27 review, item 10)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from app import crash_record, crash_supervisor

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="the supervisor forks on Linux"
)

# The child marks a phase (or not) and then dies of the signal named by argv[2].
_CHILD = """
import os, signal, sys
from app import crash_record, crash_supervisor
code = crash_supervisor.supervise("serve")
if code is not None:
    sys.exit(code)
if sys.argv[1] == "record":
    crash_record.mark(crash_record.Phase.DECODING, "/models/x.gguf")
os.kill(os.getpid(), getattr(signal, sys.argv[2]))
"""


def _supervised(tmp_path: Path, record: bool, signame: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, LLAMADESK_HOME=str(tmp_path / "home"), PYTHONPATH=str(ROOT))
    env.pop(crash_supervisor.DISABLE_ENV, None)
    return subprocess.run(
        [sys.executable, "-c", _CHILD, "record" if record else "none", signame],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def _last_line(done: subprocess.CompletedProcess[str]) -> str:
    lines = done.stderr.strip().splitlines()
    return lines[-1] if lines else ""


@pytest.mark.parametrize(
    ("record", "name", "said"),
    [
        pytest.param(
            True,
            "SIGKILL",
            "llamadesk: `llamadesk serve` was killed (SIGKILL; perhaps out of memory) while "
            "decoding with the model x.gguf.",
            id="sigkill-is-named-perhaps-out-of-memory",
        ),
        pytest.param(
            False,
            "SIGSEGV",
            "llamadesk: `llamadesk serve` crashed (SIGSEGV) before it loaded a model.",
            id="a-crash-without-a-record-does-not-blame-llama-cpp",
        ),
        pytest.param(
            True,
            "SIGSEGV",
            "llamadesk: llama.cpp crashed (SIGSEGV) while decoding with the model x.gguf; "
            "`llamadesk serve` stopped.",
            id="a-crash-with-a-record-names-llama-cpp-and-the-model",
        ),
    ],
)
def test_a_death_by_signal_is_said_in_one_line(
    tmp_path: Path, record: bool, name: str, said: str
) -> None:
    done = _supervised(tmp_path, record, name)
    assert done.returncode == 128 + signal.Signals[name]
    assert _last_line(done) == said


def test_a_stop_asked_for_says_nothing(tmp_path: Path) -> None:
    done = _supervised(tmp_path, True, "SIGTERM")
    assert done.returncode == 128 + signal.SIGTERM
    assert "llamadesk" not in done.stderr


# A shutdown that a stop signal started gets the same signal again (as a group's signal
# reaches the supervised child directly and through its parent) and must still finish.
_SHUTDOWN = """
import os, signal, sys, time
from app import crash_supervisor
try:
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(5)
except KeyboardInterrupt:
    pass
finally:
    with crash_supervisor.repeats_ignored(window_s=float(sys.argv[1])):
        os.kill(os.getpid(), signal.SIGINT)  # the repeat
        time.sleep(0.3)  # the caches being saved
        print("saved", flush=True)
"""


def test_a_repeated_stop_signal_does_not_break_the_shutdown(tmp_path: Path) -> None:
    def shutdown(window_s: float) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-c", _SHUTDOWN, str(window_s)],
            cwd=ROOT,
            env=dict(os.environ, PYTHONPATH=str(ROOT)),
            capture_output=True,
            text=True,
            timeout=60,
        )

    done = shutdown(crash_supervisor.REPEAT_S)
    assert done.returncode == 0 and done.stdout == "saved\n", done.stderr
    # After the window a stop signal acts as before: Ctrl+C still stops a stuck save.
    late = shutdown(0.0)
    assert late.returncode != 0 and "saved" not in late.stdout
    assert "KeyboardInterrupt" in late.stderr


def _write_record(folder: Path, owner: str, pid: int, **identity: object) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{owner}.json"
    path.write_text(json.dumps({"model": "/m/x.gguf", "phase": "decoding", "pid": pid, **identity}))
    return path


def test_a_start_removes_records_of_processes_that_are_gone(tmp_path: Path) -> None:
    """A parent killed with SIGKILL leaves its child's cli-<pid>.json: the next ``run`` or
    ``serve`` removes it, and keeps those of commands still running."""
    folder = tmp_path / "home" / crash_record.FOLDER
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    stale = _write_record(folder, f"cli-{gone.pid}", gone.pid)
    me = os.getpid()  # a command still running: this process, as it is
    mine = _write_record(
        folder, f"cli-{me}", me, boot=crash_record._boot_id(), started=crash_record._start_time(me)
    )
    # Its pid is this process's, but it was another process (an earlier start time).
    reused = _write_record(folder, "cli-1", me, boot=crash_record._boot_id(), started=1)
    done = _supervised(tmp_path, False, "SIGTERM")
    assert done.returncode == 128 + signal.SIGTERM
    assert not stale.exists() and not reused.exists() and mine.exists()


def test_a_window_pid_used_again_by_another_process_is_not_taken_for_it(
    tmp_path: Path,
) -> None:
    folder = crash_record.folder()
    other = os.getppid()  # alive, but not the process that wrote the record
    boot = crash_record._boot_id()
    _write_record(folder, crash_record.WINDOW, other, boot=boot, started=1)
    (folder / f"window-{other}.fault").write_text("Fatal Python error: Segmentation fault\n")
    found = crash_record.last_window_crash()
    assert found == crash_record.CrashRecord("/m/x.gguf", crash_record.Phase.DECODING, other)
    # Another boot: no process of it runs now, whatever its pid.
    _write_record(folder, crash_record.WINDOW, other, boot="an-earlier-boot", started=0)
    assert crash_record.last_window_crash() is not None
    # The very process (its start time): it runs, so it did not crash.
    started = crash_record._start_time(other)
    _write_record(folder, crash_record.WINDOW, other, boot=boot, started=started)
    assert crash_record.last_window_crash() is None
