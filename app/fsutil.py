"""File-system helpers shared by the engine, storage and the hub: atomic writes that survive
a crash at any moment (a reader sees the old file or the new one, never half), and files
and folders only their owner may read.

Every file the app writes whole goes through :func:`atomic_writer` (or
:func:`atomic_write_bytes`): a temp file in the same folder (created owner-only by
``mkstemp``), fsync'ed, renamed over the target, then the folder fsync'ed so the rename
itself is durable.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

PRIVATE_FILE_MODE = 0o600
PRIVATE_DIR_MODE = 0o700


def fsync_dir(directory: Path) -> None:
    """Make a rename in ``directory`` durable (a no-op where directories cannot be opened)."""
    if os.name == "nt":  # pragma: no cover - Windows has no directory fsync
        return
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_writer(path: Path, *, temp_prefix: str = ".tmp-") -> Iterator[BinaryIO]:
    """A binary file handle whose content replaces ``path`` when the block ends without
    an error (temp file in the same folder, fsync, rename over, fsync the folder); on an
    error the temp file is removed and ``path`` is left as it was. The new file is
    owner-only (``mkstemp``'s 0600), whatever the old one was."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=temp_prefix + path.name + ".", dir=path.parent)
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    fsync_dir(path.parent)


def atomic_write_bytes(path: Path, data: bytes, *, temp_prefix: str = ".tmp-") -> None:
    """Write ``data`` to ``path`` so that a reader sees the old or the new file, never half
    (see :func:`atomic_writer`)."""
    with atomic_writer(path, temp_prefix=temp_prefix) as handle:
        handle.write(data)


def make_private(path: Path) -> bool:
    """Take group and other permissions off an existing file (``0600``): a no-op when it is
    already private, is missing, or is not ours to change. True if the file is private now."""
    try:
        mode = stat.S_IMODE(os.stat(path).st_mode)
    except OSError:
        return False
    if mode & 0o077 == 0:
        return True
    try:
        os.chmod(path, mode & ~0o077)
    except OSError:
        return False
    return True


def create_private_file(path: Path) -> None:
    """Create ``path`` empty and owner-only if it does not exist (an existing file is left
    as it is, content and mode)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, PRIVATE_FILE_MODE)
    os.close(fd)


def make_private_dir(path: Path) -> Path:
    """``path`` as a folder, created (with missing parents) owner-only (``0700``) if it
    does not exist; an existing folder keeps its mode (the user may have chosen it)."""
    path.mkdir(parents=True, exist_ok=True, mode=PRIVATE_DIR_MODE)
    return path
