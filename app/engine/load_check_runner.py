"""Run :mod:`app.engine.load_check`'s child and say how it ended.

Starting a Python process that imports llama.cpp takes about a second (most of it the
import), more than the check itself on a small file. On Linux a warm helper process
imports it once (``python -m app.engine.load_check --serve``) and forks one child per
check, which costs milliseconds; the child still dies alone if llama.cpp aborts, and the
helper reports its exit status and what it printed. The helper leaves after
``IDLE_S`` seconds without a check (it holds ~100 MB) and when this process ends (its
stdin closes). Elsewhere (no ``fork`` on Windows; forking after loading macOS's GPU
frameworks is unsafe), or if the helper cannot be used, each check starts a new process.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import os
import select
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

log = logging.getLogger(__name__)

IDLE_S = 60.0
_TAIL = 16384  # bytes of the child's stderr kept (the last llama.cpp lines)


@dataclass(frozen=True)
class Outcome:
    """How a child ended: ``returncode`` as ``subprocess`` gives it (negative: killed by
    that signal), None when it ran past its time; its stdout and the end of its stderr."""

    returncode: int | None
    stdout: str
    stderr: str


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[2])  # the folder holding the app package
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    env["GGML_NO_BACKTRACE"] = "1"  # an abort must not attach a debugger for a backtrace
    env["OPENBLAS_NUM_THREADS"] = "1"  # no thread pool in a process that forks
    return env


def base_command() -> list[str]:
    if getattr(sys, "frozen", False):  # a PyInstaller bundle: its executable is the CLI
        return [sys.executable, "__load-check"]
    return [sys.executable, "-m", "app.engine.load_check"]


def run_spawned(args: Sequence[str], timeout: float) -> Outcome:
    """A new process for one check."""
    try:
        proc = subprocess.run(
            [*base_command(), *args],
            capture_output=True,
            timeout=timeout,
            env=child_env(),
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:  # what it printed so far says how far it got
        out = exc.stdout if isinstance(exc.stdout, bytes) else b""
        return Outcome(None, out.decode("utf-8", "replace"), "")
    return Outcome(
        proc.returncode,
        proc.stdout.decode("utf-8", "replace"),
        proc.stderr[-_TAIL:].decode("utf-8", "replace"),
    )


class _Helper:
    """The warm helper process (see the module docstring); one per process."""

    def __init__(self) -> None:
        self._proc: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()
        self._idle: threading.Timer | None = None

    def run(self, args: Sequence[str], timeout: float) -> Outcome | None:
        """The outcome, or None when the helper could not be used (the caller spawns)."""
        with self._lock:
            if self._idle is not None:
                self._idle.cancel()
            try:
                return self._run(list(args), timeout)
            finally:
                self._idle = threading.Timer(IDLE_S, self.close)
                self._idle.daemon = True
                self._idle.start()

    def _run(self, args: list[str], timeout: float) -> Outcome | None:
        for attempt in range(2):
            proc = self._ensure()
            if proc is None or proc.stdin is None or proc.stdout is None:
                return None
            try:
                proc.stdin.write(json.dumps({"args": args, "timeout": timeout}).encode() + b"\n")
                proc.stdin.flush()
                line = _readline(proc.stdout, timeout + 30.0)
            except OSError:
                line = None
            if line:
                try:
                    reply = json.loads(line)
                    return Outcome(reply["returncode"], reply["stdout"], reply["stderr"])
                except (ValueError, KeyError, TypeError):
                    pass
            log.warning("the load-check helper stopped answering (attempt %d)", attempt + 1)
            self._close_locked()
        return None

    def _ensure(self) -> subprocess.Popen[bytes] | None:
        if self._proc is not None and self._proc.poll() is None:
            return self._proc
        try:
            self._proc = subprocess.Popen(
                [*base_command(), "--serve"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                env=child_env(),
            )
        except OSError as exc:
            log.warning("the load-check helper could not start: %s", exc)
            self._proc = None
        return self._proc

    def close(self) -> None:
        with self._lock:
            self._close_locked()

    def _close_locked(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        with contextlib.suppress(OSError):
            if proc.stdin is not None:
                proc.stdin.close()  # the helper leaves at the end of its input
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


def _readline(stream: IO[bytes], timeout: float) -> bytes | None:
    deadline = time.monotonic() + timeout
    fd = stream.fileno()
    chunks: list[bytes] = []
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        ready, _, _ = select.select([fd], [], [], left)
        if not ready:
            return None
        chunk = os.read(fd, 65536)
        if not chunk:
            return None
        chunks.append(chunk)
        if chunk.endswith(b"\n"):
            return b"".join(chunks)


_helper = _Helper()
atexit.register(_helper.close)


def forking_supported() -> bool:
    return sys.platform.startswith("linux") and hasattr(os, "fork")


def run_check(args: Sequence[str], timeout: float) -> Outcome:
    """Run the child with ``args``: forked from the warm helper where it can be, else a
    new process."""
    if forking_supported():
        outcome = _helper.run(args, timeout)
        if outcome is not None:
            return outcome
    return run_spawned(args, timeout)


def close_helper() -> None:
    _helper.close()


# -- the helper's side --------------------------------------------------------------------


def serve(child_main: Any) -> int:
    """Answer check requests on stdin, one JSON line each, by forking ``child_main``."""
    # Import what every child needs once, before the first fork.
    import llama_cpp  # noqa: F401

    import app.engine.backend  # noqa: F401

    for line in sys.stdin.buffer:
        try:
            request = json.loads(line)
            args = [str(a) for a in request["args"]]
            timeout = float(request["timeout"])
        except (ValueError, KeyError, TypeError):
            return 2
        reply = _fork_one(child_main, args, timeout)
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()
    return 0


def _fork_one(child_main: Any, args: list[str], timeout: float) -> dict[str, Any]:
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        sys.stdout.flush()
        pid = os.fork()
        if pid == 0:  # the child: its stdout and stderr go to the files, then it loads
            code = 1
            try:
                os.dup2(out.fileno(), 1)
                os.dup2(err.fileno(), 2)
                code = int(child_main(args))
                sys.stdout.flush()
                sys.stderr.flush()
            except BaseException:
                traceback.print_exc()
                sys.stderr.flush()
            finally:
                os._exit(code)
        deadline = time.monotonic() + timeout
        returncode: int | None = None
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                returncode = os.waitstatus_to_exitcode(status)
                break
            if time.monotonic() > deadline:
                os.kill(pid, 9)
                os.waitpid(pid, 0)
                break
            time.sleep(0.005)
        out.seek(0)
        err.seek(0, os.SEEK_END)
        size = err.tell()
        err.seek(max(0, size - _TAIL))
        return {
            "returncode": returncode,
            "stdout": out.read().decode("utf-8", "replace"),
            "stderr": err.read().decode("utf-8", "replace"),
        }
