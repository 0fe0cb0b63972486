"""Route llama.cpp's log into Python's ``logging`` and keep the recent lines.

llama-cpp-python's own logger uses an old numbering of ggml log levels, and its
``verbose=False`` redirects the whole process's stdout/stderr; we install our own callback
instead. The last lines are kept so that an error message can quote what llama.cpp said
(for example why a model failed to load).

Nothing is ever written raw to stderr: the ``llama.cpp`` logger has a ``NullHandler``, so
without a logging configuration its records go nowhere (not to ``logging.lastResort``);
the application's configuration decides what is shown. A line repeated within
``REPEAT_WINDOW_S`` (e.g. "decode: failed to find a memory slot for batch of size 4"
while several sequences generate, which the scheduler handles) is logged once; the next
time it comes after the window, or at :func:`flush_repeats`, one record says how many
times it came meanwhile (``record.llama_repeats``).
"""

from __future__ import annotations

import collections
import ctypes
import logging
import threading
import time
from typing import Any

import llama_cpp

log = logging.getLogger("llama.cpp")
log.addHandler(logging.NullHandler())  # never logging.lastResort (raw lines on stderr)

REPEAT_WINDOW_S = 30.0
_MAX_TRACKED = 256

# ggml_log_level: 0 none, 1 debug, 2 info, 3 warn, 4 error, 5 continuation of the last line.
_LEVELS = {1: logging.DEBUG, 2: logging.INFO, 3: logging.WARNING, 4: logging.ERROR}

_recent: collections.deque[tuple[int, str]] = collections.deque(maxlen=200)
_lock = threading.Lock()
_last_level = logging.INFO
_partial: list[str] = []
_installed: Any = None  # keeps the ctypes callback alive for the life of the process
# (level, line) -> [times seen since it was last logged, when it was last logged]
_repeats: dict[tuple[int, str], list[float]] = {}


def _on_log(level: int, text: bytes, _user_data: ctypes.c_void_p) -> None:
    global _last_level
    try:
        message = text.decode("utf-8", errors="replace")
    except Exception:  # a callback must never raise into C
        return
    with _lock:
        py_level = _LEVELS.get(level, _last_level)
        if level != 5:
            _last_level = py_level
        _partial.append(message)
        if not message.endswith("\n"):
            return
        line = "".join(_partial).rstrip("\n")
        _partial.clear()
        _recent.append((py_level, line))
        level_out = py_level if py_level > logging.DEBUG else logging.DEBUG
        key = (level_out, line)
        now = time.monotonic()
        if level_out < logging.WARNING:  # load reports repeat per model: all of them go out
            suppressed = 0
            entry = None
        else:
            entry = _repeats.get(key)
        if entry is not None and now - entry[1] < REPEAT_WINDOW_S:
            entry[0] += 1
            return
        if level_out >= logging.WARNING:
            suppressed = int(entry[0]) if entry is not None else 0
            _repeats.pop(key, None)
            _repeats[key] = [0, now]
            if len(_repeats) > _MAX_TRACKED:
                del _repeats[next(iter(_repeats))]
    _log_line(level_out, line, suppressed)


def _log_line(level: int, line: str, repeats: int) -> None:
    if repeats:
        log.log(level, "%s (%d more times)", line, repeats, extra={"llama_repeats": repeats})
    else:
        log.log(level, "%s", line, extra={"llama_repeats": 0})


def flush_repeats() -> None:
    """Log how often each collapsed line came since it was last logged (e.g. at exit)."""
    with _lock:
        pending = [(key, int(entry[0])) for key, entry in _repeats.items() if entry[0]]
        for key, _ in pending:
            _repeats[key][0] = 0
    for (level, line), count in pending:
        _log_line(level, line, count)


def install() -> None:
    """Install the callback once per process (idempotent)."""
    global _installed
    if _installed is not None:
        return
    _installed = llama_cpp.llama_log_callback(_on_log)
    llama_cpp.llama_log_set(_installed, ctypes.c_void_p(0))


def recent_errors(limit: int = 3) -> list[str]:
    """The last warning/error lines llama.cpp printed, newest last."""
    with _lock:
        lines = [text for level, text in _recent if level >= logging.WARNING]
    return lines[-limit:]


def clear() -> None:
    with _lock:
        _recent.clear()
