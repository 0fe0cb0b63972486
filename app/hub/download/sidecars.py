"""Partial files and their sidecars, which let a later run continue a download.

``<downloads dir>/<owner>--<name>/NAME.part`` holds the bytes so far; ``NAME.part.json``
beside it says what they are (URL, expected size, ETag, SHA-256, the set it belongs to).
A sidecar is written atomically; one that cannot be read is skipped, never an error.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.fsutil import atomic_write_bytes
from app.hub.client import RemoteFile
from app.hub.download.disk import file_size
from app.hub.download.jobs import DownloadRequest
from app.hub.errors import UnsafeFileNameError
from app.hub.files import local_name

SIDECAR_VERSION = 1


def part_path(downloads_dir: Path, repo_id: str, remote_path: str) -> Path:
    """Where the partial file of ``remote_path`` of ``repo_id`` lives."""
    folder = downloads_dir / repo_id.replace("/", "--")
    return folder / (local_name(remote_path) + ".part")


def sidecar_of(part: Path) -> Path:
    return part.with_name(part.name + ".json")


def write_sidecar(
    sidecar: Path,
    request: DownloadRequest,
    remote: RemoteFile,
    *,
    url: str,
    size: int,
    etag: str | None,
    sha256: str | None,
) -> None:
    data = {
        "version": SIDECAR_VERSION,
        "repo_id": request.repo_id,
        "revision": request.revision,
        "path": remote.path,
        "url": url,
        "size": size,
        "etag": etag,
        "sha256": sha256,
        "dest_dir": str(request.dest_dir) if request.dest_dir else None,
        "set": [{"path": f.path, "size": f.size, "sha256": f.sha256} for f in request.files],
    }
    atomic_write_bytes(sidecar, json.dumps(data, indent=1).encode("utf-8"))


def read_json(path: Path) -> dict[str, Any] | None:
    """A JSON object from ``path``, or None (missing, unreadable, not an object)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


@dataclass(frozen=True)
class PendingDownload:
    """A download an earlier run left unfinished: what it is and how far it got."""

    request: DownloadRequest
    done: int  # bytes in its partial files
    total: int | None


def scan_pending(downloads_dir: Path) -> list[PendingDownload]:
    """The unfinished downloads in ``downloads_dir``, from their sidecars (a few small
    files: run it off the GUI thread all the same). Unreadable sidecars are skipped."""
    found: dict[str, tuple[DownloadRequest, dict[str, int]]] = {}
    for sidecar in sorted(downloads_dir.glob("*/*.part.json")):
        data = read_json(sidecar)
        if data is None:
            continue
        try:
            files = tuple(
                RemoteFile(str(f["path"]), int(f["size"]), f.get("sha256")) for f in data["set"]
            )
            dest = data.get("dest_dir")
            request = DownloadRequest(
                str(data["repo_id"]), files, str(data["revision"]), Path(dest) if dest else None
            )
            path, size = str(data["path"]), int(data["size"])
        except (KeyError, TypeError, ValueError):
            continue
        if not files:
            continue
        _request, sizes = found.setdefault(request.job_id, (request, {}))
        sizes[path] = size  # the size the Hub's HEAD gave (the listing's may be 0)
    out: list[PendingDownload] = []
    for request, sizes in found.values():
        done = 0
        for remote in request.files:
            with contextlib.suppress(UnsafeFileNameError):
                done += file_size(part_path(downloads_dir, request.repo_id, remote.path))
        known = [sizes.get(f.path) or f.size for f in request.files]
        total = sum(known) if all(k > 0 for k in known) else None
        out.append(PendingDownload(request, done, total))
    return out
