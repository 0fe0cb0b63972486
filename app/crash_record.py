"""A native crash is never silent (issue 27, item 1c): what was running when it came.

A crash inside llama.cpp (SIGSEGV, an assert's SIGABRT) ends the process before any Python
code can say a word, so the sentence is prepared before: each load writes a small record
(the model, the phase: "loading", then "decoding" once the weights are in) into the data
folder's ``crash`` folder, and closing the model removes it.

- ``run`` and ``serve`` work in a forked child watched by their parent
  (:mod:`app.crash_supervisor`), which reads the child's record when it dies of a signal
  and prints the sentence.
- The window keeps ``window.json`` and lets :mod:`faulthandler` write into a file of its
  own (``window-<pid>.fault``) when a fatal signal comes. The next start finds both (a
  record alone means the window was killed or the computer stopped: not a crash), says
  which model crashed while doing what, and does not load it by itself
  (:func:`last_window_crash`).

No llama.cpp and no Qt here: the session layer marks the phases, the UI reads the record.
"""

from __future__ import annotations

import contextlib
import enum
import faulthandler
import json
import logging
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from app import paths
from app.fsutil import atomic_write_bytes

log = logging.getLogger(__name__)

FOLDER = "crash"
WINDOW = "window"


class Phase(enum.Enum):
    LOADING = "loading"
    DECODING = "decoding"


@dataclass(frozen=True)
class CrashRecord:
    """What a process was doing with which model (``model``: its path). ``boot`` and
    ``started``: which process ``pid`` was (this boot's id, its start time in clock ticks;
    "" and 0 where unknown), so a pid used again by another process is not taken for it."""

    model: str
    phase: Phase
    pid: int
    boot: str = field(default="", compare=False)
    started: int = field(default=0, compare=False)

    @property
    def model_name(self) -> str:
        return Path(self.model).name

    @property
    def doing(self) -> str:
        """ "loading the model X" or "decoding with the model X"."""
        if self.phase is Phase.LOADING:
            return f"loading the model {self.model_name}"
        return f"decoding with the model {self.model_name}"


_lock = threading.Lock()
_owner: str | None = None  # whose record this process writes: "window", "cli-<pid>"; None: none
_current: CrashRecord | None = None
_fault_file: IO[bytes] | None = None  # kept open: faulthandler writes into it when it dies


def folder() -> Path:
    return paths.data_dir() / FOLDER


def record_path(owner: str) -> Path:
    return folder() / f"{owner}.json"


def install(owner: str | None) -> None:
    """From now on this process keeps its record as ``owner`` (:func:`mark`); None: no
    record any more."""
    global _owner
    with _lock:
        _owner = owner


def mark(phase: Phase, model: str) -> None:
    """Before a phase that may crash in llama.cpp (a no-op where no owner is installed)."""
    global _current
    with _lock:
        if _owner is None:
            return
        pid = os.getpid()
        record = CrashRecord(model, phase, pid, _boot_id(), _start_time(pid))
        if record == _current:
            return
        data = {
            "model": model,
            "phase": phase.value,
            "pid": record.pid,
            "boot": record.boot,
            "started": record.started,
        }
        try:
            atomic_write_bytes(record_path(_owner), json.dumps(data).encode("utf-8"))
        except OSError as exc:  # a read-only data folder: a crash is then only less precise
            log.warning("could not write the crash record: %s", exc)
            return
        _current = record


def clear(model: str | None = None) -> None:
    """The model (any, when None) is closed: nothing of it is running any more."""
    global _current
    with _lock:
        if _owner is None or _current is None:
            return
        if model is not None and _current.model != model:
            return
        with contextlib.suppress(OSError):
            record_path(_owner).unlink()
        _current = None


def read(owner: str) -> CrashRecord | None:
    """The record ``owner`` left, if any (damaged ones are None)."""
    try:
        data = json.loads(record_path(owner).read_text("utf-8"))
        return CrashRecord(
            str(data["model"]),
            Phase(data["phase"]),
            int(data["pid"]),
            str(data.get("boot", "")),
            int(data.get("started", 0)),
        )
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def take(owner: str) -> CrashRecord | None:
    """:func:`read`, then remove the record."""
    record = read(owner)
    with contextlib.suppress(OSError):
        record_path(owner).unlink()
    return record


# -- the window ---------------------------------------------------------------------------


def _fault_path(pid: int) -> Path:
    return folder() / f"{WINDOW}-{pid}.fault"


def _boot_id() -> str:
    """This boot's id (Linux), "" elsewhere: a record of an earlier boot is of no process."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text("ascii").strip()
    except OSError:
        return ""


def _start_time(pid: int) -> int:
    """When process ``pid`` started (clock ticks since boot, /proc's field 22), 0 where
    unknown."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text("ascii", "replace")
        # The command name (field 2) may hold spaces and parentheses: count after its end.
        return int(stat[stat.rindex(")") + 2 :].split()[19])
    except (OSError, ValueError, IndexError):
        return 0


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def is_running(record: CrashRecord) -> bool:
    """Whether the process that wrote ``record`` still runs: its pid lives, in this boot,
    and is the same process (its start time), not another one given that pid since."""
    if record.boot and record.boot != _boot_id():
        return False
    if not _alive(record.pid):
        return False
    return not record.started or record.started == _start_time(record.pid)


def sweep_stale() -> None:
    """Remove the ``cli-<pid>.json`` records whose process is gone (a parent killed with
    SIGKILL could not read and remove its child's). Called when ``run``/``serve`` start."""
    try:
        stale = list(folder().glob("cli-*.json"))
    except OSError:
        return
    for path in stale:
        record = read(path.stem)
        if record is None or not is_running(record):
            with contextlib.suppress(OSError):
                path.unlink()


def last_window_crash() -> CrashRecord | None:
    """The crash the last window session ended in (its record, and its fault file says
    a fatal signal came), or None. Read once at start, before :func:`watch_window`."""
    record = read(WINDOW)
    if record is None or record.pid == os.getpid() or is_running(record):
        return None
    try:
        crashed = _fault_path(record.pid).stat().st_size > 0
    except OSError:
        crashed = False
    return record if crashed else None


def watch_window() -> None:
    """Keep this window's record, and have :mod:`faulthandler` write into its fault file
    when a fatal signal comes. The last session's record and fault files are removed
    (read them first: :func:`last_window_crash`)."""
    global _fault_file
    record = read(WINDOW)
    if record is not None and not is_running(record):
        with contextlib.suppress(OSError):
            record_path(WINDOW).unlink()
    try:
        folder().mkdir(parents=True, exist_ok=True)
        for old in folder().glob(f"{WINDOW}-*.fault"):
            pid = old.stem.rpartition("-")[2]
            if pid.isdigit() and not _alive(int(pid)):
                old.unlink()
        # Not a with-block: it stays open for the process's life (faulthandler's file).
        _fault_file = open(_fault_path(os.getpid()), "wb")
        faulthandler.enable(_fault_file, all_threads=True)
    except OSError as exc:
        log.warning("could not prepare the crash record: %s", exc)
    install(WINDOW)


def end_window_watch() -> None:
    """A clean end: no record, no fault file."""
    global _fault_file
    clear()
    if _fault_file is not None:
        with contextlib.suppress(OSError, ValueError, RuntimeError):
            faulthandler.disable()
            _fault_file.close()
            _fault_path(os.getpid()).unlink()
        _fault_file = None
