"""Errors raised by :mod:`app.storage`; each ``str()`` is one sentence for the user."""

from __future__ import annotations

from pathlib import Path

from app.errors import LlamaDeskError


class StorageError(LlamaDeskError):
    """Something about the saved data went wrong; the message says what to do."""


class NotFoundError(StorageError):
    """A conversation, message or model that was asked for does not exist (any more)."""


class ReadOnlyModeError(StorageError):
    """A change was attempted on a database opened with ``read_only=True``."""

    def __init__(self, path: Path) -> None:
        self.path = path
        super().__init__(
            f"The conversation database at {path} is open read-only, so this change was not "
            "saved; restart LlamaDesk normally (or move the database aside) to make changes."
        )


class DatabaseBusyError(StorageError):
    """Another process held the write lock for longer than the timeout."""

    def __init__(self, path: Path) -> None:
        self.path = path
        super().__init__(
            f"The conversation database at {path} is busy (another LlamaDesk may be writing "
            "to it); wait a moment and try again."
        )


class DiskError(StorageError):
    """The disk is full or failed while reading or writing."""

    def __init__(self, path: Path, detail: str) -> None:
        self.path = path
        self.detail = detail
        super().__init__(
            f"Could not read or write the conversation database at {path} ({detail}); "
            "free some disk space or check the drive, then try again."
        )


class DatabaseOpenError(StorageError):
    """The database cannot be used normally; :attr:`ways_out` lists what the user can do.

    ``"read_only"`` means ``Database.open(path, read_only=True)`` is worth offering,
    ``"move_aside"`` means :func:`app.storage.move_aside` followed by a fresh
    ``Database.open(path)``.
    """

    ways_out: tuple[str, ...] = ("move_aside",)

    def __init__(self, path: Path, message: str) -> None:
        self.path = path
        super().__init__(message)


class DatabaseCorruptError(DatabaseOpenError):
    """The file is not a database or SQLite found damaged pages."""

    ways_out = ("move_aside",)

    def __init__(self, path: Path, detail: str) -> None:
        self.detail = detail
        super().__init__(
            path,
            f"The conversation database at {path} is damaged ({detail}). "
            "LlamaDesk can move it aside and start with an empty one.",
        )


class DatabaseTooNewError(DatabaseOpenError):
    """``PRAGMA user_version`` is newer than this code knows how to read."""

    ways_out = ("read_only", "move_aside")

    def __init__(self, path: Path, found: int, known: int) -> None:
        self.found = found
        self.known = known
        super().__init__(
            path,
            f"The conversation database at {path} was written by a newer LlamaDesk "
            f"(schema {found}; this version knows up to {known}). Update LlamaDesk, open it "
            "read-only, or let LlamaDesk move it aside and start with an empty one.",
        )


class DatabaseReadOnlyError(DatabaseOpenError):
    """The file or its folder cannot be written."""

    ways_out = ("read_only", "move_aside")

    def __init__(self, path: Path) -> None:
        super().__init__(
            path,
            f"The conversation database at {path} cannot be written (the file or its folder "
            "is read-only). Fix its permissions, open it read-only without saving changes, "
            "or let LlamaDesk move it aside and start with an empty one.",
        )


class ImportValidationError(StorageError):
    """An import file failed validation; nothing was imported."""

    def __init__(self, where: str, problem: str) -> None:
        self.where = where
        self.problem = problem
        location = f" ({where})" if where else ""
        super().__init__(f"The file cannot be imported{location}: {problem}; nothing was imported.")
