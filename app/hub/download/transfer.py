"""One file of a job on its way: where it goes, what it must be, and the GET that fills it.

Everything here runs on the download thread (the caller of :func:`stream_to_part`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import httpx2

# From the defining module: huggingface_hub.utils re-exports them only implicitly.
from huggingface_hub.utils._http import get_session, hf_raise_for_status

from app.hub.background import HubWorker
from app.hub.client import RemoteFile
from app.hub.download.disk import file_size, remove_quietly
from app.hub.download.hashing import HashPipe

_SHA_LEN = 64
REPORT_BYTES = 1 << 20  # how often a transfer reports progress (and checks pause/cancel)
SHORT_READ = 1 << 16  # a read shorter than this: the socket had no more data waiting


def sha_like(value: str | None) -> str | None:
    """``value`` in lower case if it is a SHA-256 in hex (an LFS ETag is one), else None."""
    if value and len(value) == _SHA_LEN and all(c in "0123456789abcdef" for c in value.lower()):
        return value.lower()
    return None


@dataclass
class Transfer:
    """One file of a job on disk."""

    remote: RemoteFile
    part: Path
    sidecar: Path
    dest: Path
    size: int
    sha256: str | None
    etag: str | None
    url: str
    digest: str | None = None  # SHA-256 of the whole part file, computed while downloading


class Speed:
    """Bytes per second over the last few seconds."""

    def __init__(self, window: float = 3.0) -> None:
        self.window = window
        self.samples: list[tuple[float, int]] = []

    def add(self, now: float, total_bytes: int) -> None:
        self.samples.append((now, total_bytes))
        while len(self.samples) > 2 and now - self.samples[0][0] > self.window:
            self.samples.pop(0)

    def rate(self) -> float:
        if len(self.samples) < 2:
            return 0.0
        (t0, b0), (t1, b1) = self.samples[0], self.samples[-1]
        return (b1 - b0) / (t1 - t0) if t1 > t0 else 0.0


def stream_to_part(
    t: Transfer,
    start: int,
    *,
    headers: dict[str, str],
    stall_timeout: float,
    open_part: Callable[[Path, str], BinaryIO],
    hash_worker: HubWorker,
) -> Iterator[int]:
    """GET ``t.url`` from byte ``start`` into ``t.part`` (``Range`` to continue it); yields
    the bytes in the file after each report-sized step, and sets ``t.digest`` when the
    whole file was hashed on the way."""
    headers = headers | {"Accept-Encoding": "identity"}
    if start > 0:
        headers["Range"] = f"bytes={start}-"
    timeout = httpx2.Timeout(
        connect=min(stall_timeout, 30.0),
        read=stall_timeout,
        write=stall_timeout,
        pool=stall_timeout,
    )
    with get_session().stream(
        "GET", t.url, headers=headers, timeout=timeout, follow_redirects=True
    ) as response:
        if response.status_code == 416 and start > 0:
            # The range starts at or past the end: the server's file is shorter.
            remove_quietly(t.part)
            raise httpx2.RemoteProtocolError("the partial file is longer than the file")
        hf_raise_for_status(response)
        mode = "ab"
        if start > 0 and response.status_code != 206:
            mode, start = "wb", 0  # the server ignored the Range: start again
        written = start
        hasher = HashPipe(t.part, start, hash_worker)
        try:
            with open_part(t.part, mode) as fh:
                # Every chunk is written as it comes (a drop loses nothing), but the
                # caller's per-report work (progress, speed, pause checks) runs once a
                # MiB: that, not the socket, bounded the speed (0.72x curl before).
                reported = written
                for chunk in response.iter_raw():
                    fh.write(chunk)
                    hasher.put(chunk)
                    written += len(chunk)
                    if written > t.size > 0:
                        raise httpx2.RemoteProtocolError("the server sent more bytes than expected")
                    # ...and at once when the stream slows (a short read): the user
                    # sees where it stands, and a pause lands, before a stall.
                    if written - reported >= REPORT_BYTES or len(chunk) < SHORT_READ:
                        reported = written
                        yield written
                if written != reported:
                    yield written
        finally:
            digest = hasher.finish()
        t.digest = digest if digest is not None and written == file_size(t.part) else None
