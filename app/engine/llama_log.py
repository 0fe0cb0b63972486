"""Route llama.cpp's log into Python's ``logging`` and keep the recent lines.

llama-cpp-python's own logger uses an old numbering of ggml log levels, and its
``verbose=False`` redirects the whole process's stdout/stderr; we install our own callback
instead. The last lines are kept so that an error message can quote what llama.cpp said
(for example why a model failed to load).
"""

from __future__ import annotations

import collections
import ctypes
import logging
import threading
from typing import Any

import llama_cpp

log = logging.getLogger("llama.cpp")

# ggml_log_level: 0 none, 1 debug, 2 info, 3 warn, 4 error, 5 continuation of the last line.
_LEVELS = {1: logging.DEBUG, 2: logging.INFO, 3: logging.WARNING, 4: logging.ERROR}

_recent: collections.deque[tuple[int, str]] = collections.deque(maxlen=200)
_lock = threading.Lock()
_last_level = logging.INFO
_partial: list[str] = []
_installed: Any = None  # keeps the ctypes callback alive for the life of the process


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
    log.log(py_level if py_level > logging.DEBUG else logging.DEBUG, "%s", line)


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
