"""The window's door to its conversations: the session's :class:`~app.session.library.Library`.

The window changes and reads conversation rows only through it (never a ``Database`` of
its own), so no SQLite call runs on the GUI thread. :func:`settle` waits for an answer
the window needs before it goes on (the id of a new chat, the thread of a fork): the
library's thread does nothing else, so the wait is a row change's few milliseconds, never
a model load's seconds.
"""

from __future__ import annotations

from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import TYPE_CHECKING, Final, TypeVar

from app.errors import LlamaDeskError

if TYPE_CHECKING:
    from app.session import Session
    from app.session.library import Library
    from app.storage import Message

T = TypeVar("T")

# Longer than any row change; reached only when the disk hangs.
SETTLE_TIMEOUT_S: Final = 10.0


def library(session: Session) -> Library:
    """The session's library (a window's session always has one: it is given the
    database, read-only or not)."""
    found = session.library
    if found is None:
        raise LlamaDeskError("The conversations cannot be reached: no database is open.")
    return found


def settle(future: Future[T]) -> T:
    """The answer (or the library's error, raised here)."""
    try:
        return future.result(SETTLE_TIMEOUT_S)
    except FutureTimeout:
        # Not run later behind the user's back: "try again" must not make it happen twice
        # (a change still queued is dropped; one already running finishes).
        future.cancel()
        raise LlamaDeskError(
            f"The conversations did not answer in {SETTLE_TIMEOUT_S:.0f} s; try again."
        ) from None


def places(session: Session, messages: list[Message]) -> dict[int, tuple[int, int]]:
    """Each message's place among its siblings (1-based index, count), read by the
    session's library (no read for no messages)."""
    if not messages:
        return {}
    return settle(library(session).sibling_positions(m.id for m in messages))
