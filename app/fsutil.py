"""File-system helpers shared by the engine, storage and the hub: atomic writes that survive
a crash at any moment (a reader sees the old file or the new one, never half), and files
and folders only their owner may read.

Every file the app writes whole goes through :func:`atomic_writer` (or
:func:`atomic_write_bytes`): a temp file in the same folder (created owner-only by
``mkstemp``), fsync'ed, renamed over the target, then the folder fsync'ed so the rename
itself is durable. The folder it has to make is owner-only (``0700``) too.

Folders under the data folder are made with :func:`make_private_dir` (``tighten=True``
for the app's own ones: a folder an older version left ``0755`` is fixed), and
:func:`tighten_tree` fixes what an older version left readable at start-up. Neither ever
changes the user's home, a folder above it, a temp root (``/tmp``) or ``/``
(:func:`is_shared_root`): ``LLAMADESK_HOME=~`` must not lock the user out of sharing
their home.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from collections.abc import Collection, Iterator
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
    make_private_dir(path.parent)
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


def is_shared_root(path: Path) -> bool:
    """Whether ``path`` is a folder whose mode is never the app's to change: ``/``, the
    user's home or a folder above it, or a temp root (``/tmp``, ``/var/tmp``, the
    platform's temp folder)."""
    try:
        real = path.resolve()
    except (OSError, RuntimeError):
        return True
    roots = {Path("/"), Path("/tmp"), Path("/var/tmp"), Path("/dev/shm")}
    with contextlib.suppress(OSError):
        roots.add(Path(tempfile.gettempdir()).resolve())
    try:
        home = Path.home().resolve()
    except (OSError, RuntimeError, KeyError):  # no home to be found: nothing more to spare
        return real in roots
    return real in roots or real == home or real in home.parents


def _tighten(path: Path, st: os.stat_result) -> bool:
    """Take group and other permissions off ``path`` (stat'ed as ``st``, not followed) if
    it has any and is ours; True if it was changed."""
    mode = stat.S_IMODE(st.st_mode)
    if mode & 0o077 == 0 or (hasattr(os, "getuid") and st.st_uid != os.getuid()):
        return False
    try:
        os.chmod(path, mode & ~0o077)
    except OSError:
        return False
    return True


def make_private_dir(path: Path, *, tighten: bool = False) -> Path:
    """``path`` as a folder, created owner-only (``0700``) if it does not exist (missing
    folders above it get the usual mode, as ``mkdir -p`` gives: they are not the app's).
    ``tighten``: an existing folder loses its group and other permissions too (the app's
    own folders; never a shared root, :func:`is_shared_root`); without it an existing
    folder keeps its mode (the user may have chosen it)."""
    existed = path.is_dir()
    path.mkdir(parents=True, exist_ok=True, mode=PRIVATE_DIR_MODE)
    if tighten and existed and not is_shared_root(path):
        with contextlib.suppress(OSError):
            _tighten(path, os.lstat(path))
    return path


def tighten_tree(root: Path, folders: Collection[str]) -> int:
    """Make what an older version left readable owner-only: ``root`` itself, the regular
    files directly in it, and the subfolders named in ``folders`` with everything in them
    (folders ``0700``, files ``0600``). Other subfolders (the model library: model files
    are not secret) and symbolic links are left as they are; so is a shared root. Returns
    how many entries were changed."""
    if is_shared_root(root):
        return 0
    changed = 0
    try:
        changed += _tighten(root, os.lstat(root))
        entries = list(os.scandir(root))
    except OSError:
        return changed
    stack: list[os.DirEntry[str]] = []
    for entry in entries:
        try:
            if entry.is_file(follow_symlinks=False):
                changed += _tighten(Path(entry.path), entry.stat(follow_symlinks=False))
            elif entry.name in folders and entry.is_dir(follow_symlinks=False):
                stack.append(entry)
        except OSError:
            continue
    while stack:
        entry = stack.pop()
        try:
            changed += _tighten(Path(entry.path), entry.stat(follow_symlinks=False))
            inside = list(os.scandir(entry.path))
        except OSError:
            continue
        for item in inside:
            try:
                if item.is_dir(follow_symlinks=False):
                    stack.append(item)
                elif item.is_file(follow_symlinks=False):
                    changed += _tighten(Path(item.path), item.stat(follow_symlinks=False))
            except OSError:
                continue
    return changed
