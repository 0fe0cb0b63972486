"""The conversations' rows, as the window changes and reads them: the session's door to
storage for everything but a turn's messages (those are the :mod:`recorder`'s).

Every change the window makes to a conversation (create, fork, rename, pin, delete,
restore, purge, its settings, the branch it shows, the open tabs, an import) and every
read it needs (a conversation, a thread, a message's siblings, the list) is a method here
that returns a :class:`~concurrent.futures.Future`. They run one after another on a thread
of their own ("conversations"), on a connection cloned there: never on the GUI thread, and
never behind the engine thread (a model load holds that one for seconds). SQLite's WAL
lets this connection, the recorder's and the search's work side by side.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, TypeVar

from app.errors import LlamaDeskError

if TYPE_CHECKING:  # storage is imported only by clients that keep a database
    from app.storage import Conversation, Database, Message, Tab

log = logging.getLogger(__name__)

T = TypeVar("T")

THREAD_NAME = "conversations"


class Library:
    """See the module docstring. Thread-safe; each method returns at once."""

    def __init__(self, database: Database) -> None:
        self._source = database
        self._db: Database | None = None  # cloned on the library's thread
        # A daemon thread of its own, not a ThreadPoolExecutor: an executor's thread is
        # joined at interpreter exit and refuses work once exit began, when the session
        # thread may still be closing the library.
        self._jobs: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._serve, name=THREAD_NAME, daemon=True)
        self._closed = False
        self._lock = threading.Lock()

    def _serve(self) -> None:  # the library's thread
        while (job := self._jobs.get()) is not None:
            job()
        if self._db is not None:
            self._db.close()
            self._db = None

    @property
    def read_only(self) -> bool:
        return self._source.read_only

    def _do(self, fn: Callable[[Database], T]) -> Future[T]:
        future: Future[T] = Future()

        def job() -> None:  # on the library's thread
            if not future.set_running_or_notify_cancel():
                return
            try:
                if self._db is None:
                    self._db = self._source.clone()
                future.set_result(fn(self._db))
            except Exception as exc:  # the storage's sentence (or a bug), to the caller
                future.set_exception(exc)

        with self._lock:
            if self._closed:
                future.set_exception(LlamaDeskError("The conversations are closed."))
                return future
            if not self._thread.is_alive():
                self._thread.start()
            self._jobs.put(job)
        return future

    # -- changes --------------------------------------------------------------------------

    def create(
        self,
        title: str | None = None,
        *,
        system_prompt: str = "",
        sampling: Mapping[str, Any] | None = None,
        model_path: str | None = None,
    ) -> Future[Conversation]:
        return self._do(
            lambda db: db.create_conversation(
                title, system_prompt=system_prompt, sampling=sampling, model_path=model_path
            )
        )

    def fork(self, conversation_id: int, up_to_message_id: int) -> Future[Conversation]:
        """A copy of the conversation up to the message (its branch only)."""
        return self._do(lambda db: db.fork_conversation(conversation_id, up_to_message_id))

    def rename(self, conversation_id: int, title: str) -> Future[None]:
        return self._do(lambda db: db.rename(conversation_id, title))

    def set_pinned(self, conversation_id: int, pinned: bool) -> Future[None]:
        return self._do(lambda db: db.set_pinned(conversation_id, pinned))

    def delete(self, conversation_id: int) -> Future[None]:
        """To the trash (``restore`` brings it back until it is purged)."""
        return self._do(lambda db: db.delete_conversation(conversation_id))

    def delete_if_unused(self, conversation_id: int) -> Future[bool]:
        """To the trash only if it holds no message (an unused "New chat"), decided here in
        one job: what a tab shows may be short of what is stored (a thread that did not
        load, a message recorded after the tab last looked). True if it went."""

        def job(db: Database) -> bool:
            if db.get_conversation(conversation_id, include_deleted=True).message_count:
                return False
            db.delete_conversation(conversation_id)
            return True

        return self._do(job)

    def restore(self, conversation_id: int) -> Future[Conversation]:
        return self._do(lambda db: db.restore_conversation(conversation_id))

    def purge_deleted(self, older_than_seconds: float = 0.0) -> Future[list[int]]:
        return self._do(lambda db: db.purge_deleted(older_than_seconds=older_than_seconds))

    def update_settings(
        self, conversation_id: int, *, system_prompt: str, sampling: Mapping[str, Any]
    ) -> Future[Conversation]:
        return self._do(
            lambda db: db.update_conversation_settings(
                conversation_id, system_prompt=system_prompt, sampling=sampling
            )
        )

    def show_branch(self, conversation_id: int, message_id: int) -> Future[int]:
        """Make the branch through ``message_id`` the one the conversation shows (its
        current leaf: the last message under it); the future holds that leaf."""

        def change(db: Database) -> int:
            leaf = db.leaf_of(message_id)
            db.set_current_leaf(conversation_id, leaf)
            return leaf

        return self._do(change)

    def import_data(self, data: Mapping[str, Any]) -> list[int]:
        """Import a checked export (:func:`app.storage.export.import_json`: all or
        nothing); the new conversations' ids. Called on a background thread (never the
        GUI's), it runs there on a connection of its own: an import of thousands of
        messages takes seconds, which the library's thread (the window's reads) must not
        wait for."""
        from app.storage.export import import_json

        if self._closed:
            raise LlamaDeskError("The conversations are closed.")
        db = self._source.clone()
        try:
            return import_json(db, dict(data))
        finally:
            db.close()

    def save_tabs(self, tabs: Iterable[Tab], active_conversation_id: int | None) -> Future[None]:
        chosen = tuple(tabs)
        return self._do(lambda db: db.save_tabs(chosen, active_conversation_id))

    # -- reads ----------------------------------------------------------------------------

    def load_tabs(self) -> Future[tuple[list[Tab], int | None]]:
        """The tabs saved at the last close, and the one that was active."""
        return self._do(lambda db: db.load_tabs())

    def conversation(
        self, conversation_id: int, include_deleted: bool = False
    ) -> Future[Conversation]:
        return self._do(
            lambda db: db.get_conversation(conversation_id, include_deleted=include_deleted)
        )

    def thread(self, conversation_id: int, leaf_id: int | None = None) -> Future[list[Message]]:
        return self._do(lambda db: db.get_thread(conversation_id, leaf_id))

    def shown_thread(
        self, conversation_id: int, leaf_id: int | None = None
    ) -> Future[tuple[list[Message], dict[int, tuple[int, int]]]]:
        """The thread to ``leaf_id`` (the current one when that is gone) and each
        message's place among its siblings, read together (one job, one snapshot)."""

        def read(db: Database) -> tuple[list[Message], dict[int, tuple[int, int]]]:
            try:
                thread = db.get_thread(conversation_id, leaf_id)
            except LlamaDeskError:
                if leaf_id is None:
                    raise
                thread = db.get_thread(conversation_id)
            return thread, _positions(db, [m.id for m in thread])

        return self._do(read)

    def message(self, message_id: int) -> Future[Message]:
        return self._do(lambda db: db.get_message(message_id))

    def siblings(self, message_id: int) -> Future[list[Message]]:
        return self._do(lambda db: db.siblings(message_id))

    def children(self, message_id: int) -> Future[list[Message]]:
        return self._do(lambda db: db.children(message_id))

    def sibling_positions(self, message_ids: Iterable[int]) -> Future[dict[int, tuple[int, int]]]:
        """Each message's place among its siblings (1-based index, count)."""
        ids = tuple(message_ids)
        return self._do(lambda db: _positions(db, ids))

    def listing(self, include_archived: bool = False) -> Future[list[Conversation]]:
        return self._do(lambda db: db.list_conversations(include_archived=include_archived))

    def close(self, timeout_s: float = 5.0) -> None:
        """Finish the queued work, then close the connection (on its thread)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            started = self._thread.is_alive()
            self._jobs.put(None)
        if started:
            self._thread.join(timeout_s)


def _positions(db: Database, message_ids: Iterable[int]) -> dict[int, tuple[int, int]]:
    """Each message's (1-based index, count) among its siblings ((1, 1): gone meanwhile)."""
    found: dict[int, tuple[int, int]] = {}
    for message_id in message_ids:
        try:
            found[message_id] = db.sibling_position(message_id)
        except LlamaDeskError:
            found[message_id] = (1, 1)
    return found
