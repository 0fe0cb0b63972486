"""Memory that a large request used goes back to the system afterwards.

A request body near the 8 MiB bound is held several times over (the bytes, the decoded
text, the prompt string, token arrays). glibc's malloc raises its mmap threshold to the
largest block freed so far, so after the first such request the next ones are carved out
of the heap of whichever thread arena served them, and a thread-per-connection server
keeps up to eight arenas per core: resident memory grew by ~150 MB over a hostile run
and stayed. Fixing the threshold keeps large blocks mmapped (freed at once, whole), and a
small arena cap bounds what idle arenas hold. Elsewhere than glibc, nothing changes.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import sys
import threading

log = logging.getLogger(__name__)

# mallopt(3) parameters (glibc's malloc.h).
M_MMAP_THRESHOLD = -3
M_ARENA_MAX = -8
# Blocks from this size on are mmapped: request bodies, prompt texts and token arrays of
# large requests; a decode step's buffers (logits of a 262k vocabulary: 1 MiB) stay below.
MMAP_THRESHOLD = 4 << 20
ARENA_MAX = 4

_lock = threading.Lock()
_done = False


def limit_heap_growth() -> bool:
    """Set glibc's malloc as above, once per process; True when it was set."""
    global _done
    with _lock:
        if _done:
            return True
        if not sys.platform.startswith("linux"):
            return False
        try:
            libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
            mallopt = libc.mallopt
        except (OSError, AttributeError):  # not glibc (musl has no mallopt)
            return False
        mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
        mallopt.restype = ctypes.c_int
        _done = bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(
            mallopt(M_ARENA_MAX, ARENA_MAX)
        )
        if not _done:
            log.info("malloc did not accept the heap limits; large requests may keep memory")
        return _done
