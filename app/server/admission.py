"""How many requests generate at once, and how many may wait for a turn."""

from __future__ import annotations

import threading

from app.server.errors import unavailable
from app.server.reply_items import ClientGone, Gone


class Admission:
    """At most ``slots`` requests generating and ``queue`` waiting; 503 beyond."""

    def __init__(self, slots: int, queue_size: int) -> None:
        self.slots = slots
        self.queue_size = queue_size
        self._sem = threading.Semaphore(slots)
        self._lock = threading.Lock()
        self.active = 0
        self.waiting = 0

    def enter(self, gone: Gone) -> None:
        with self._lock:
            if self.active + self.waiting >= self.slots + self.queue_size:
                raise unavailable(
                    f"The server is busy: {self.active} requests are generating and "
                    f"{self.waiting} are waiting (at most {self.queue_size}). Retry shortly.",
                    "server_busy",
                )
            self.waiting += 1
        try:
            while not self._sem.acquire(timeout=0.05):
                if gone():
                    raise ClientGone
        finally:
            with self._lock:
                self.waiting -= 1
        with self._lock:
            self.active += 1

    def leave(self) -> None:
        with self._lock:
            self.active -= 1
        self._sem.release()
