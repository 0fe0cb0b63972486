"""The download's files on disk: sizes, free space, checksums, and the move into the library."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import shutil
import stat
from pathlib import Path

from app.fsutil import atomic_writer
from app.hub.errors import DiskSpaceError

# Room left free beyond what a download needs (the file system's own bookkeeping, logs).
DISK_MARGIN = 16 << 20


def file_size(path: Path) -> int:
    """The size of ``path``; 0 when it is missing or unreadable."""
    try:
        return path.stat().st_size
    except OSError:
        return 0


def remove_quietly(path: Path) -> None:
    with contextlib.suppress(OSError):
        path.unlink()


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb", buffering=0) as fh:
        buf = bytearray(4 << 20)
        view = memoryview(buf)
        while n := fh.readinto(buf):
            h.update(view[:n])
    return h.hexdigest()


def move_into_place(src: Path, dst: Path) -> None:
    """Rename ``src`` to ``dst``; across file systems, copy it atomically (``dst`` is the
    whole file or absent, with ``src``'s mode) and then remove ``src``."""
    try:
        os.replace(src, dst)
    except OSError as exc:
        if exc.errno != errno.EXDEV:
            raise
        with open(src, "rb") as source, atomic_writer(dst, temp_prefix=".incoming-") as out:
            if hasattr(os, "fchmod"):  # mkstemp made it owner-only; a model file is not secret
                os.fchmod(out.fileno(), stat.S_IMODE(os.fstat(source.fileno()).st_mode))
            shutil.copyfileobj(source, out, 4 << 20)
        src.unlink()


def check_space(need_here: int, downloads_dir: Path, dest_dir: Path, total: int, name: str) -> None:
    """Refuse (with a sentence) a download that would not fit: ``need_here`` more bytes in
    ``downloads_dir``, and ``total`` bytes in ``dest_dir`` when it is on another disk (the
    files are copied there at the end)."""
    free = shutil.disk_usage(downloads_dir).free
    if free < need_here + DISK_MARGIN:
        raise DiskSpaceError(
            f"Not enough free disk space for {name}: it needs "
            f"{_mb(need_here + DISK_MARGIN)} and {_mb(free)} is free in {downloads_dir}. "
            "Free some space and try again."
        )
    with contextlib.suppress(OSError):
        if os.stat(dest_dir).st_dev != os.stat(downloads_dir).st_dev:
            free_dest = shutil.disk_usage(dest_dir).free
            if free_dest < total + DISK_MARGIN:
                raise DiskSpaceError(
                    f"Not enough free disk space in {dest_dir} for {name}: it "
                    f"needs {_mb(total)} and {_mb(free_dest)} is free."
                )


def _mb(n: int) -> str:
    from app.settings_schema import format_bytes

    return format_bytes(max(n, 0))
