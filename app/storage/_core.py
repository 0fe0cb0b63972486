"""Opening, migrating and transacting: the part of :class:`Database` every other part uses."""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import threading
import time
import urllib.parse
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Self, cast

from app import paths
from app.fsutil import create_private_file, fsync_dir, make_private, make_private_dir
from app.storage.errors import (
    DatabaseBusyError,
    DatabaseCorruptError,
    DatabaseReadOnlyError,
    DatabaseTooNewError,
    DiskError,
    NotFoundError,
    ReadOnlyModeError,
    StorageError,
)
from app.storage.schema import MIGRATIONS, SCHEMA_VERSION, split_statements

log = logging.getLogger(__name__)

BUSY_TIMEOUT_S = 10.0
# SQLite's companions of a database file: the write-ahead log and its shared-memory index
# (WAL mode), the rollback journal (never used in WAL mode, but kept with the set).
COMPANION_SUFFIXES = ("-wal", "-shm", "-journal")


def database_files(path: Path) -> tuple[Path, ...]:
    """The database file and its companions, as SQLite names them."""
    return (path, *(Path(str(path) + suffix) for suffix in COMPANION_SUFFIXES))


def make_database_private(path: Path) -> None:
    """The database and its companions owner-only (0600), like the state files: a file
    that already exists with a looser mode (an older version, a copy) is fixed, and one
    that is missing is left to SQLite, which gives the -wal and -shm files the mode of the
    database file."""
    for file in database_files(path):
        if not make_private(file) and file.exists():
            log.warning("Could not make %s private (owner-only)", file)


def translate_error(exc: sqlite3.Error, path: Path) -> StorageError | None:
    """The user-facing error for an SQLite error, or None if it is a programming error."""
    name = str(getattr(exc, "sqlite_errorname", "") or "")
    text = str(exc)
    lowered = text.lower()
    if name.startswith(("SQLITE_CORRUPT", "SQLITE_NOTADB")) or any(
        word in lowered for word in ("malformed", "not a database", "database corrupt")
    ):
        return DatabaseCorruptError(path, text)
    if name.startswith("SQLITE_READONLY") or "readonly database" in lowered:
        return DatabaseReadOnlyError(path)
    if name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")) or "database is locked" in lowered:
        return DatabaseBusyError(path)
    if name.startswith(("SQLITE_FULL", "SQLITE_IOERR")) or "disk" in lowered:
        return DiskError(path, text)
    if name.startswith("SQLITE_CANTOPEN") or "unable to open database" in lowered:
        if not os.access(path.parent, os.W_OK):
            return DatabaseReadOnlyError(path)
        return DiskError(path, text)
    return None


@contextlib.contextmanager
def storage_errors(path: Path) -> Iterator[None]:
    """Turn SQLite's environmental errors into :class:`StorageError` sentences."""
    try:
        yield
    except sqlite3.Error as exc:
        translated = translate_error(exc, path)
        if translated is None:
            raise
        raise translated from exc


def _connect(path: Path, read_only: bool, immutable: bool = False) -> sqlite3.Connection:
    if read_only:
        query = "mode=ro&immutable=1" if immutable else "mode=ro"
        uri = f"file:{urllib.parse.quote(str(path))}?{query}"
        conn = sqlite3.connect(
            uri, uri=True, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=True
        )
    else:
        conn = sqlite3.connect(
            str(path), timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=True
        )
    conn.row_factory = sqlite3.Row
    return conn


def _backup_before_migration(conn: sqlite3.Connection, path: Path, version: int) -> None:
    """Copy a database that holds data before changing its schema (kept next to it)."""
    target = path.with_name(f"{path.name}.before-schema-{version + 1}")
    if target.exists():
        return
    partial = target.with_name(target.name + ".partial")
    with contextlib.suppress(FileNotFoundError):
        partial.unlink()  # left by an interrupted backup: it may have any mode
    create_private_file(partial)  # a copy of every conversation: owner-only too
    dest = sqlite3.connect(str(partial))
    try:
        conn.backup(dest)  # SQLite syncs the copy before backup() returns
    finally:
        dest.close()
    os.replace(partial, target)
    fsync_dir(target.parent)
    log.info("Backed up the database to %s before migrating it", target)


def migrate(conn: sqlite3.Connection, path: Path, *, target: int = SCHEMA_VERSION) -> None:
    """Bring the schema up to ``target``, one transaction per step (safe if interrupted).

    A database that already holds data is first copied to ``<name>.before-schema-N``.
    """
    backed_up = False
    while True:
        version = int(conn.execute("PRAGMA user_version").fetchone()[0])
        if version >= target:
            return
        if version > 0 and not backed_up:
            _backup_before_migration(conn, path, version)
        backed_up = True  # only a database that existed before this call is copied
        conn.execute("BEGIN IMMEDIATE")
        try:
            version = int(conn.execute("PRAGMA user_version").fetchone()[0])
            if version < target:
                for statement in split_statements(MIGRATIONS[version]):
                    conn.execute(statement)
                conn.execute(f"PRAGMA user_version = {version + 1}")
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        log.info("Migrated %s to schema %d", path, version + 1)


class DatabaseCore:
    """Connection handling shared by the :class:`~app.storage.Database` mixins.

    The connection serves the thread that opened it (the rule: :mod:`app.storage.threads`);
    :meth:`clone` on another thread gives that thread its own, cheaply.
    """

    def __init__(self, conn: sqlite3.Connection, path: Path, read_only: bool) -> None:
        self._conn = conn
        self.path = path
        self.read_only = read_only
        self._depth = 0
        self._owner = threading.get_ident()

    # -- opening -------------------------------------------------------------------------

    @classmethod
    def open(
        cls, path: Path | None = None, *, read_only: bool = False, check: bool = False
    ) -> Self:
        """Open (creating and migrating if needed) the conversation database.

        Raises :class:`DatabaseCorruptError`, :class:`DatabaseTooNewError` or
        :class:`DatabaseReadOnlyError` (all :class:`DatabaseOpenError`, whose ``ways_out``
        say whether to offer ``read_only=True`` and/or :func:`move_aside`). With
        ``read_only=True`` nothing is ever written and a newer schema is read as far as
        possible. Nothing is repaired or overwritten silently.

        Damage inside the file is otherwise only found when a damaged page is read (then a
        :class:`DatabaseCorruptError` comes from that call); ``check=True`` runs SQLite's
        ``quick_check`` first, which reads the whole file (see the benchmark for its cost).
        """
        db_path = Path(path) if path is not None else paths.database_path()
        db_path = db_path.expanduser().absolute()
        if read_only:
            db = cls(_open_read_only(db_path), db_path, True)
            if check:
                db._quick_check()
            return db
        try:
            make_private_dir(db_path.parent)
        except OSError as exc:
            raise DiskError(db_path, f"cannot create its folder: {exc.strerror or exc}") from exc
        exists = db_path.exists() and db_path.stat().st_size > 0
        if exists and not os.access(db_path, os.W_OK):
            raise DatabaseReadOnlyError(db_path)
        if not os.access(db_path.parent, os.W_OK):
            raise DatabaseReadOnlyError(db_path)
        if not db_path.exists():
            try:
                # Created owner-only here rather than by SQLite (0644 less the umask); an
                # empty file is an empty database to SQLite.
                create_private_file(db_path)
            except OSError as exc:
                raise DiskError(db_path, exc.strerror or str(exc)) from exc
        make_database_private(db_path)
        try:
            conn = _connect(db_path, read_only=False)
        except sqlite3.Error as exc:
            raise (translate_error(exc, db_path) or DiskError(db_path, str(exc))) from exc
        try:
            with storage_errors(db_path):
                version = int(conn.execute("PRAGMA user_version").fetchone()[0])
                if version > SCHEMA_VERSION:
                    raise DatabaseTooNewError(db_path, version, SCHEMA_VERSION)
                conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
                mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
                if str(mode).lower() != "wal":
                    # Still usable (e.g. a file system without shared memory); just slower.
                    log.warning("Could not switch %s to WAL mode (got %s)", db_path, mode)
                conn.execute("PRAGMA synchronous = FULL")
                conn.execute("PRAGMA foreign_keys = ON")
                migrate(conn, db_path)
        except BaseException:
            conn.close()
            raise
        db = cls(conn, db_path, False)
        if check:
            db._quick_check()
        return db

    def _quick_check(self) -> None:
        try:
            rows = self._all("PRAGMA quick_check")
            problems = [str(row[0]) for row in rows]
        except BaseException:
            self.close()
            raise
        if problems != ["ok"]:
            self.close()
            first = problems[0].splitlines()
            detail = first[-1] if first else "quick_check failed"
            raise DatabaseCorruptError(self.path, detail.strip(" *"))

    def clone(self) -> Self:
        """Another connection to the same file, for use in the calling thread."""
        return type(self).open(self.path, read_only=self.read_only)

    def close(self) -> None:
        """Close the connection (idempotent). In WAL mode the last close checkpoints."""
        conn = getattr(self, "_conn", None)
        if conn is None:
            return
        try:
            if not self.read_only and threading.get_ident() == self._owner:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("PRAGMA optimize")
            conn.close()
        except sqlite3.ProgrammingError:  # closed from another thread: let GC do it
            pass
        self._conn = None  # type: ignore[assignment]

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def schema_version(self) -> int:
        return int(self._one("PRAGMA user_version")[0])

    def integrity_check(self) -> list[str]:
        """``PRAGMA integrity_check`` problems ([] when healthy). O(size of the file)."""
        rows = self._all("PRAGMA integrity_check")
        problems = [str(row[0]) for row in rows]
        return [] if problems == ["ok"] else problems

    # -- transactions and queries --------------------------------------------------------

    @contextlib.contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """A write transaction (``BEGIN IMMEDIATE``); nested calls become savepoints.

        Commits when the block ends, rolls back if it raises. SQLite errors caused by the
        environment come out as :class:`StorageError`.
        """
        if self.read_only:
            raise ReadOnlyModeError(self.path)
        conn = self._conn
        depth = self._depth
        with storage_errors(self.path):
            if depth == 0:
                conn.execute("BEGIN IMMEDIATE")
            else:
                conn.execute(f"SAVEPOINT sp{depth}")
        self._depth = depth + 1
        try:
            with storage_errors(self.path):
                yield conn
        except BaseException:
            self._depth = depth
            with contextlib.suppress(sqlite3.Error):
                if depth == 0:
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                else:
                    conn.execute(f"ROLLBACK TO sp{depth}")
                    conn.execute(f"RELEASE sp{depth}")
            raise
        self._depth = depth
        try:
            with storage_errors(self.path):
                conn.execute("COMMIT" if depth == 0 else f"RELEASE sp{depth}")
        except BaseException:
            if depth == 0 and conn.in_transaction:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
            raise

    def _all(self, sql: str, params: Sequence[Any] = ()) -> list[sqlite3.Row]:
        with storage_errors(self.path):
            return list(self._conn.execute(sql, params).fetchall())

    def _one(self, sql: str, params: Sequence[Any] = ()) -> sqlite3.Row:
        row = self._maybe_one(sql, params)
        if row is None:  # pragma: no cover - only for queries that always return a row
            raise NotFoundError("The requested item does not exist; reload and try again.")
        return row

    def _maybe_one(self, sql: str, params: Sequence[Any] = ()) -> sqlite3.Row | None:
        with storage_errors(self.path):
            row = self._conn.execute(sql, params).fetchone()
        return cast(sqlite3.Row | None, row)

    @staticmethod
    def _now() -> float:
        return time.time()


def _open_read_only(path: Path) -> sqlite3.Connection:
    if not path.exists():
        raise StorageError(f"There is no conversation database at {path} to open read-only.")
    last: sqlite3.Error | None = None
    for immutable in (False, True):
        conn: sqlite3.Connection | None = None
        try:
            conn = _connect(path, read_only=True, immutable=immutable)
            conn.execute("PRAGMA query_only = ON")
            conn.execute("PRAGMA user_version").fetchone()
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
            if immutable:
                log.warning(
                    "Opened %s as immutable (its folder is not writable); the newest "
                    "unsaved changes in its -wal file may not be visible",
                    path,
                )
            return conn
        except sqlite3.Error as exc:
            if conn is not None:
                conn.close()
            translated = translate_error(exc, path)
            if isinstance(translated, DatabaseCorruptError):
                raise translated from exc
            last = exc
    assert last is not None
    raise DiskError(path, str(last)) from last


def move_aside(path: Path | None = None) -> Path:
    """Rename the database (and its -wal/-shm files, which stay a consistent set) to
    ``<name>.moved-YYYYmmdd-HHMMSS`` and return the new database path. The next
    ``Database.open(path)`` then starts with an empty database; nothing is deleted."""
    db_path = Path(path) if path is not None else paths.database_path()
    db_path = db_path.expanduser().absolute()
    stamp = time.strftime("%Y%m%d-%H%M%S")
    target = db_path.with_name(f"{db_path.name}.moved-{stamp}")
    counter = 1
    while any(file.exists() for file in database_files(target)):
        counter += 1
        target = db_path.with_name(f"{db_path.name}.moved-{stamp}-{counter}")
    try:
        for suffix in (*COMPANION_SUFFIXES, ""):
            source = Path(str(db_path) + suffix)
            if source.exists():
                os.replace(source, Path(str(target) + suffix))
    except OSError as exc:
        raise StorageError(
            f"Could not move the conversation database at {db_path} aside ({exc.strerror}); "
            "move or rename it by hand, then start LlamaDesk again."
        ) from exc
    log.warning("Moved the conversation database %s aside to %s", db_path, target)
    return target
