"""``run`` and ``serve`` say so when llama.cpp crashes them (issue 27, item 1c).

A SIGSEGV inside llama.cpp ends the process without a word (the shell shows exit code 139
at best). So on Linux these commands fork before they load anything: the child does the
work and keeps its crash record (:mod:`app.crash_record`, the model and the phase); the
parent only waits. When the child dies of a signal, the parent prints one sentence naming
the model and what was running (loading or decoding) and exits with the shell's code for
that signal (128 + the signal's number: 139 for SIGSEGV).

The parent passes on the signals sent to it (``kill``, a service manager's SIGTERM);
those a terminal sends (Ctrl+C) reach the child too, so they are not sent twice. A signal
sent to the whole group by a program (``kill -INT -PGID``, a service manager stopping every
process) still reaches the child twice, directly and through the parent: the child's
shutdown ignores a repeat that comes within :data:`REPEAT_S` (:func:`repeats_ignored`), so
the second one does not break ``serve``'s saving of its caches. The
child dies with the parent (``PR_SET_PDEATHSIG``): a ``kill -9`` of the parent ends both,
as it ended the one process before. Elsewhere (no ``fork``, or
``LLAMADESK_NO_CRASH_SUPERVISOR=1``) the command runs in one process as before.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from types import FrameType

from app import crash_record

DISABLE_ENV = "LLAMADESK_NO_CRASH_SUPERVISOR"
_CHILD_ENV = "LLAMADESK_CRASH_SUPERVISED"  # set in the child: it does not fork again
_PR_SET_PDEATHSIG = 1
_SI_KERNEL = 0x80  # siginfo's si_code of a signal the kernel sent (a terminal's Ctrl+C)
_FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)
_WAITED = {*_FORWARDED, signal.SIGCHLD}
_STOPS = (signal.SIGINT, signal.SIGTERM)
REPEAT_S = 1.0  # a stop signal this soon after the shutdown began is the same one again
CRASH_SIGNALS = frozenset(
    {signal.SIGSEGV, signal.SIGABRT, signal.SIGBUS, signal.SIGFPE, signal.SIGILL}
)


def supervise(command: str) -> int | None:
    """Fork: in the child, None (go on with the command); in the parent, the child's exit
    code once it ended (after the sentence, when it crashed). None also where no fork."""
    if (
        not sys.platform.startswith("linux")
        or not hasattr(os, "fork")
        or os.environ.get(DISABLE_ENV) == "1"
        or os.environ.get(_CHILD_ENV) == "1"
    ):
        return None
    crash_record.sweep_stale()  # records a parent killed with SIGKILL left
    parent = os.getpid()
    sys.stdout.flush()
    sys.stderr.flush()
    old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, _WAITED)
    pid = os.fork()
    if pid == 0:
        signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)
        os.environ[_CHILD_ENV] = "1"  # e.g. `run --rpc`'s watched child must not fork again
        _die_with(parent)
        crash_record.install(f"cli-{os.getpid()}")
        return None
    try:
        code = _wait(pid)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)
    return _ended(command, pid, code)


@contextlib.contextmanager
def repeats_ignored(window_s: float = REPEAT_S) -> Iterator[None]:
    """While a shutdown runs: SIGINT and SIGTERM in its first ``window_s`` are the signal
    that started it, delivered again (see the module's text), and are dropped; later ones
    act as before (a second Ctrl+C still stops a save that hangs)."""
    if threading.current_thread() is not threading.main_thread():
        yield  # signal handlers can only be set from the main thread
        return
    start = time.monotonic()
    previous = {int(signum): signal.getsignal(signum) for signum in _STOPS}

    def on_stop(signum: int, frame: FrameType | None) -> None:
        if time.monotonic() - start < window_s:
            return
        before = previous[signum]
        if callable(before):
            before(signum, frame)
        elif before == signal.SIG_DFL:
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)

    for signum in _STOPS:
        signal.signal(signum, on_stop)
    try:
        yield
    finally:
        for number, before in previous.items():
            signal.signal(number, before if before is not None else signal.SIG_DFL)


def _die_with(parent: int) -> None:
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    if os.getppid() != parent:  # the parent died before the line above
        os._exit(1)


def _wait(pid: int) -> int:
    """The child's exit code as ``subprocess`` gives it (negative: its signal)."""
    while True:
        info = signal.sigwaitinfo(_WAITED)
        if info.si_signo != signal.SIGCHLD:
            if info.si_code != _SI_KERNEL:  # sent to the parent alone: pass it on
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, info.si_signo)
            continue
        done, status = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return os.waitstatus_to_exitcode(status)


def _ended(command: str, pid: int, code: int) -> int:
    record = crash_record.take(f"cli-{pid}")
    if code >= 0:
        return code
    signum = -code
    sentence = ended_sentence(command, signum, record)
    if sentence is not None and record is not None and signum in CRASH_SIGNALS:
        sentence += remembered(record.model)
    if sentence is not None:
        sys.stdout.flush()
        print(f"\nllamadesk: {sentence}", file=sys.stderr, flush=True)
    return 128 + signum


def remembered(model: str) -> str:
    """Keep that ``model`` crashed llama.cpp (its later loads go without the extra CPU
    buffer types, where the crashes seen were: :func:`load_check.remember_crash`) and
    say so ("" when its file cannot be read)."""
    from pathlib import Path

    from app.engine import load_check

    if not load_check.remember_crash(Path(model)):
        return ""
    return f" {Path(model).name} loads without llama.cpp's faster CPU kernels from now on."


def ended_sentence(
    command: str, signum: int, record: crash_record.CrashRecord | None
) -> str | None:
    """What to say when the child died of ``signum`` (None: a stop asked for, no word).

    llama.cpp is blamed only when a record says it was loading or decoding; SIGKILL is
    no crash of ours but mostly the kernel's out-of-memory killer."""
    if signum != signal.SIGKILL and signum not in CRASH_SIGNALS:
        return None
    try:
        name = signal.Signals(signum).name
    except ValueError:
        name = f"signal {signum}"
    if signum == signal.SIGKILL:
        what = f"while {record.doing}" if record is not None else "before it loaded a model"
        return f"`llamadesk {command}` was killed (SIGKILL; perhaps out of memory) {what}."
    if record is None:
        return f"`llamadesk {command}` crashed ({name}) before it loaded a model."
    return f"llama.cpp crashed ({name}) while {record.doing}; `llamadesk {command}` stopped."
