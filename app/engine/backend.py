"""llama.cpp's backend, initialised once per process (its own module so that the model and
the first-load check, which runs in a child, can both start it without importing each
other)."""

from __future__ import annotations

import threading

import llama_cpp

from app.engine import llama_log

__all__ = ["ensure_backend"]

_backend_lock = threading.Lock()
_backend_ready = False


def ensure_backend() -> None:
    """Initialise llama.cpp once per process and route its log to ``logging``."""
    global _backend_ready
    with _backend_lock:
        if not _backend_ready:
            llama_log.install()
            llama_cpp.llama_backend_init()
            _backend_ready = True
