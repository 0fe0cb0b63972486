"""A download queue for Hub files: resumable, verified, retried, with its own thread.

The protocol is the Hub's (what ``hf_hub_download`` speaks): a HEAD of
``{endpoint}/{repo}/resolve/{revision}/{file}`` through huggingface_hub's
``get_hf_file_metadata`` (ETag / X-Linked-Etag, X-Linked-Size), then a GET of the same URL
on huggingface_hub's HTTP session, following the redirect to the CDN (the token is not sent
across origins), with ``Range: bytes=N-`` to continue a partial file. ``hf_hub_download``
itself is not used because it offers no pause or cancel, no progress callback other than a
tqdm class, a fixed retry policy, and keeps its partial files in its own cache layout.

Partial files live in ``<data dir>/downloads/<owner>--<name>/NAME.part`` beside
``NAME.part.json`` (URL, expected size, ETag, SHA-256, the set it belongs to), so a new
manager (after a restart) continues them; a changed ETag starts the file again. A file
enters the library folder only after its SHA-256 matched the Hub's LFS metadata, and the
parts of a split model only together.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import hashlib
import json
import logging
import os
import queue
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Literal, cast

import httpx2
from huggingface_hub.utils import get_session, hf_raise_for_status

from app.hub import config
from app.hub.client import FileMetadata, GGUFEntry, HubClient, RemoteFile
from app.hub.errors import (
    ChecksumMismatchError,
    DiskSpaceError,
    HubError,
    UnsafeFileNameError,
    describe,
)
from app.hub.events import (
    Cancelled,
    DownloadEvent,
    Failed,
    Finished,
    Paused,
    Progress,
    Queued,
    Resumed,
    Retrying,
    Started,
    Verified,
)
from app.hub.files import check_repo_path, inside, local_name

log = logging.getLogger(__name__)

_SIDECAR_VERSION = 1
_DISK_MARGIN = 16 << 20
_SHA_LEN = 64
_REPORT_BYTES = 1 << 20  # how often a transfer reports progress (and checks pause/cancel)
_SHORT_READ = 1 << 16  # a read shorter than this: the socket had no more data waiting

State = Literal["queued", "running", "paused", "finished", "failed", "cancelled"]


@dataclass(frozen=True)
class DownloadRequest:
    """One model to download: a file, or every part of a split model (downloaded as a set)."""

    repo_id: str
    files: tuple[RemoteFile, ...]
    revision: str = "main"
    dest_dir: Path | None = None  # default: the library folder

    @property
    def job_id(self) -> str:
        return f"{self.repo_id}/{self.files[0].path}@{self.revision}"

    @property
    def total(self) -> int | None:
        sizes = [f.size for f in self.files]
        return sum(sizes) if all(s > 0 for s in sizes) else None

    @classmethod
    def of(
        cls, repo_id: str, entry: GGUFEntry, revision: str = "main", dest_dir: Path | None = None
    ) -> DownloadRequest:
        return cls(repo_id, entry.files, revision, dest_dir)


@dataclass(frozen=True)
class JobStatus:
    job_id: str
    request: DownloadRequest
    state: State
    done: int
    total: int | None
    message: str | None  # the failure's sentence


class _Stop(Exception):
    def __init__(self, why: Literal["pause", "cancel", "close"]) -> None:
        super().__init__(why)
        self.why = why


@dataclass
class _Job:
    request: DownloadRequest
    state: State = "queued"
    done: int = 0
    total: int | None = None
    message: str | None = None
    stop: str | None = None  # "pause" / "cancel" / "close", set from other threads
    wake: threading.Event = field(default_factory=threading.Event)


@dataclass
class _Transfer:
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


def _sha_like(value: str | None) -> str | None:
    if value and len(value) == _SHA_LEN and all(c in "0123456789abcdef" for c in value.lower()):
        return value.lower()
    return None


class DownloadManager:
    """Downloads one job at a time on its own thread; ``subscribe`` to its events.

    ``stall_timeout``: seconds without a byte before the connection counts as stalled and
    is retried. ``max_attempts``: attempts in a row without progress before a job fails
    (its partial file kept). ``backoff``: the first retry's delay, doubled each time up to
    ``max_backoff``.
    """

    def __init__(
        self,
        client: HubClient | None = None,
        *,
        downloads_dir: Path | None = None,
        library_dir: Path | None = None,
        stall_timeout: float = 30.0,
        max_attempts: int = 6,
        backoff: float = 1.0,
        max_backoff: float = 60.0,
        progress_interval: float = 0.25,
        on_event: Callable[[DownloadEvent], None] | None = None,
    ) -> None:
        self.client = client or HubClient()
        self.downloads_dir = downloads_dir or config.downloads_dir()
        self.library_dir = library_dir or config.library_dir()
        self.stall_timeout = stall_timeout
        self.max_attempts = max(1, max_attempts)
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.progress_interval = progress_interval
        self._subscribers: list[Callable[[DownloadEvent], None]] = []
        if on_event is not None:
            self._subscribers.append(on_event)
        self._lock = threading.RLock()
        self._jobs: dict[str, _Job] = {}
        self._queue: queue.Queue[str | None] = queue.Queue()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="llamadesk-downloads", daemon=True)
        self._thread.start()

    # Public API ---------------------------------------------------------------------------

    def subscribe(self, callback: Callable[[DownloadEvent], None]) -> None:
        with self._lock:
            self._subscribers.append(callback)

    def enqueue(self, request: DownloadRequest) -> str:
        """Queue a download (nothing happens if the same job is queued or running)."""
        for f in request.files:
            check_repo_path(f.path)
            local_name(f.path)
        with self._lock:
            if self._closed:
                raise HubError("The download queue is closed.")
            job_id = request.job_id
            job = self._jobs.get(job_id)
            if job is not None and job.state in ("queued", "running"):
                return job_id
            self._jobs[job_id] = _Job(request, total=request.total)
        self._emit(Queued(job_id, tuple(f.path for f in request.files), request.total))
        self._queue.put(job_id)
        return job_id

    def pause(self, job_id: str) -> None:
        """Stop a job, keeping its partial file; :meth:`resume` continues it."""
        with self._lock:
            job = self._jobs.get(job_id)
            if job is None or job.state not in ("queued", "running"):
                return
            if job.state == "queued":
                job.state = "paused"
                paused = Paused(job_id, job.done, job.total or 0)
            else:
                job.stop = "pause"
                job.wake.set()
                return
        self._emit(paused)

    def resume(self, job_id: str) -> None:
        with self._lock:
            job = self._jobs.get(job_id)
            if job is None or job.state not in ("paused", "failed"):
                return
            job.state, job.stop, job.message = "queued", None, None
            job.wake.clear()
        self._emit(Resumed(job_id))
        self._queue.put(job_id)

    def cancel(self, job_id: str) -> None:
        """Stop a job and delete its partial files."""
        with self._lock:
            job = self._jobs.get(job_id)
            if job is None or job.state in ("finished", "cancelled"):
                return
            if job.state == "running":
                job.stop = "cancel"
                job.wake.set()
                return
            job.state = "cancelled"
        self._discard(job.request)
        self._emit(Cancelled(job_id))

    def status(self, job_id: str) -> JobStatus:
        with self._lock:
            job = self._jobs[job_id]
            return JobStatus(job_id, job.request, job.state, job.done, job.total, job.message)

    def jobs(self) -> list[JobStatus]:
        with self._lock:
            ids = list(self._jobs)
        return [self.status(i) for i in ids]

    def pending(self) -> list[DownloadRequest]:
        """Downloads left unfinished by an earlier run (from their sidecars)."""
        return [p.request for p in scan_pending(self.downloads_dir)]

    def adopt(self, pending: PendingDownload) -> str:
        """Know an unfinished download of an earlier run as a paused job (nothing is
        fetched): :meth:`resume` continues it, :meth:`cancel` deletes its partial files."""
        job_id = pending.request.job_id
        with self._lock:
            if job_id not in self._jobs:
                self._jobs[job_id] = _Job(
                    pending.request, state="paused", done=pending.done, total=pending.total
                )
        return job_id

    def wait(self, job_id: str, timeout: float | None = None) -> JobStatus:
        """Block until the job is no longer queued or running (for the command line)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            status = self.status(job_id)
            if status.state not in ("queued", "running"):
                return status
            if deadline is not None and time.monotonic() > deadline:
                return status
            time.sleep(0.02)

    def close(self, timeout: float = 10.0) -> None:
        """Stop the worker; a running job is paused (its partial file kept)."""
        with self._lock:
            self._closed = True
            for job in self._jobs.values():
                if job.state == "running":
                    job.stop = "close"
                    job.wake.set()
        self._queue.put(None)
        self._thread.join(timeout)

    # Worker -------------------------------------------------------------------------------

    def _emit(self, event: DownloadEvent) -> None:
        with self._lock:
            subscribers = list(self._subscribers)
        for callback in subscribers:
            try:
                callback(event)
            except Exception:
                log.exception("download event handler failed")

    def _run(self) -> None:
        while True:
            job_id = self._queue.get()
            if job_id is None:
                return
            with self._lock:
                job = self._jobs.get(job_id)
                if job is None or job.state != "queued" or self._closed:
                    continue
                job.state = "running"
            self._run_job(job_id, job)

    def _run_job(self, job_id: str, job: _Job) -> None:
        try:
            paths = self._download(job_id, job)
        except _Stop as stop:
            with self._lock:
                job.stop = None
                if stop.why == "cancel":
                    job.state = "cancelled"
                else:
                    job.state = "paused"
            if stop.why == "cancel":
                self._discard(job.request)
                self._emit(Cancelled(job_id))
            else:
                self._emit(Paused(job_id, job.done, job.total or 0))
            return
        except Exception as exc:
            error = describe(exc, job.request.repo_id, job.request.files[0].path)
            kept = any(self._part_path(job.request, f).exists() for f in job.request.files)
            with self._lock:
                job.state, job.message = "failed", str(error)
            self._emit(Failed(job_id, str(error), kept))
            return
        with self._lock:
            job.state = "finished"
        self._emit(Finished(job_id, paths[0], tuple(paths)))

    def _part_path(self, request: DownloadRequest, remote: RemoteFile) -> Path:
        folder = self.downloads_dir / request.repo_id.replace("/", "--")
        return folder / (local_name(remote.path) + ".part")

    def _discard(self, request: DownloadRequest) -> None:
        for remote in request.files:
            part = self._part_path(request, remote)
            for p in (part, part.with_name(part.name + ".json")):
                with contextlib.suppress(OSError):
                    p.unlink()

    def _check(self, job: _Job) -> None:
        why = job.stop
        if why in ("pause", "cancel", "close"):
            raise _Stop(why)  # type: ignore[arg-type]

    def _download(self, job_id: str, job: _Job) -> list[Path]:
        request = job.request
        dest_dir = (request.dest_dir or self.library_dir).expanduser()
        dest_dir.mkdir(parents=True, exist_ok=True)
        transfers: list[_Transfer] = []
        for remote in request.files:
            dest = inside(dest_dir, remote.path)
            part = self._part_path(request, remote)
            part.parent.mkdir(parents=True, exist_ok=True)
            meta: FileMetadata = self._with_retries(
                job_id, job, functools.partial(self._head, request, remote), remote.path
            )
            size = meta.size if meta.size is not None else remote.size
            sha = _sha_like(remote.sha256) or _sha_like(meta.etag)
            transfer = _Transfer(
                remote,
                part,
                part.with_name(part.name + ".json"),
                dest,
                size,
                sha,
                meta.etag,
                meta.url,
            )
            self._reconcile(request, transfer)
            transfers.append(transfer)

        # Files already in the library with the right checksum are not fetched again.
        todo: list[_Transfer] = []
        for t in transfers:
            if t.dest.exists():
                if (
                    t.sha256
                    and t.dest.stat().st_size == t.size
                    and _sha256_file(t.dest) == t.sha256
                ):
                    continue
                raise HubError(
                    f"A different file named {t.dest.name} is already in {dest_dir}: move it "
                    "away or download to another folder."
                )
            todo.append(t)

        total = sum(t.size for t in transfers)
        have = sum(_size(t.part) for t in todo) + sum(t.size for t in transfers if t not in todo)
        with self._lock:
            job.total, job.done = total, have
        self._check_space(todo, dest_dir)
        self._emit(Started(job_id, have, total))

        done_before = sum(t.size for t in transfers if t not in todo)
        for t in todo:
            self._fetch(job_id, job, t, done_before, total)
            digest, checked = self._verify(t)
            self._emit(Verified(job_id, t.remote.path, digest, checked))
            done_before += t.size

        # All parts verified: move them into the library together.
        for t in todo:
            _move(t.part, t.dest)
            with contextlib.suppress(OSError):
                t.sidecar.unlink()
        if todo:
            with contextlib.suppress(OSError):
                todo[0].part.parent.rmdir()
        return [t.dest for t in transfers]

    def _head(self, request: DownloadRequest, remote: RemoteFile) -> FileMetadata:
        return self.client.file_metadata(request.repo_id, remote.path, request.revision)

    def _reconcile(self, request: DownloadRequest, t: _Transfer) -> None:
        """Keep a partial file only if it is of the same file (ETag and size)."""
        old = _read_json(t.sidecar)
        same = (
            old is not None
            and old.get("etag") == t.etag
            and old.get("size") == t.size
            and old.get("path") == t.remote.path
        )
        if not same or _size(t.part) > t.size:
            with contextlib.suppress(OSError):
                t.part.unlink()
        data = {
            "version": _SIDECAR_VERSION,
            "repo_id": request.repo_id,
            "revision": request.revision,
            "path": t.remote.path,
            "url": t.url,
            "size": t.size,
            "etag": t.etag,
            "sha256": t.sha256,
            "dest_dir": str(request.dest_dir) if request.dest_dir else None,
            "set": [{"path": f.path, "size": f.size, "sha256": f.sha256} for f in request.files],
        }
        tmp = t.sidecar.with_name(t.sidecar.name + ".tmp")
        tmp.write_text(json.dumps(data, indent=1), encoding="utf-8")
        os.replace(tmp, t.sidecar)

    def _check_space(self, todo: list[_Transfer], dest_dir: Path) -> None:
        need = sum(t.size - _size(t.part) for t in todo)
        if not todo:
            return
        free = shutil.disk_usage(self.downloads_dir).free
        if free < need + _DISK_MARGIN:
            raise DiskSpaceError(
                f"Not enough free disk space for {todo[0].dest.name}: it needs "
                f"{_mb(need + _DISK_MARGIN)} and {_mb(free)} is free in {self.downloads_dir}. "
                "Free some space and try again."
            )
        with contextlib.suppress(OSError):
            if os.stat(dest_dir).st_dev != os.stat(self.downloads_dir).st_dev:
                free_dest = shutil.disk_usage(dest_dir).free
                total = sum(t.size for t in todo)
                if free_dest < total + _DISK_MARGIN:
                    raise DiskSpaceError(
                        f"Not enough free disk space in {dest_dir} for {todo[0].dest.name}: it "
                        f"needs {_mb(total)} and {_mb(free_dest)} is free."
                    )

    def _with_retries(self, job_id: str, job: _Job, action: Callable[[], Any], what: str) -> Any:
        attempt = 0
        while True:
            self._check(job)
            try:
                return action()
            except _Stop:
                raise
            except Exception as exc:
                error = describe(exc, job.request.repo_id, what)
                attempt += 1
                if not error.retryable or attempt >= self.max_attempts:
                    raise error from exc
                self._sleep_before_retry(job_id, job, attempt, str(error))

    def _sleep_before_retry(self, job_id: str, job: _Job, attempt: int, reason: str) -> None:
        delay = min(self.max_backoff, self.backoff * 2 ** (attempt - 1))
        self._emit(Retrying(job_id, attempt, reason, delay))
        job.wake.wait(delay)
        self._check(job)

    def _fetch(self, job_id: str, job: _Job, t: _Transfer, before: int, total: int) -> None:
        """Bring ``t.part`` to ``t.size`` bytes, resuming and retrying."""
        attempt = 0
        speed = _Speed()
        last_emit = 0.0
        while True:
            self._check(job)
            start = _size(t.part)
            if start >= t.size > 0:
                return
            progressed = False
            try:
                for chunk_bytes in self._stream(t, start):
                    progressed = True
                    now = time.monotonic()
                    speed.add(now, chunk_bytes)
                    done = before + chunk_bytes
                    with self._lock:
                        job.done = done
                    if now - last_emit >= self.progress_interval:
                        last_emit = now
                        rate = speed.rate()
                        eta = (total - done) / rate if rate > 0 else None
                        self._emit(Progress(job_id, done, total, rate, eta, t.remote.path))
                    self._check(job)
                got = _size(t.part)
                if t.size and got < t.size:
                    raise httpx2.RemoteProtocolError(
                        f"the server closed the connection after {got} of {t.size} bytes"
                    )
                rate = speed.rate()
                with self._lock:
                    job.done = before + got
                self._emit(Progress(job_id, before + got, total, rate, 0.0, t.remote.path))
                return
            except _Stop:
                raise
            except Exception as exc:
                error = describe(exc, job.request.repo_id, t.remote.path)
                if isinstance(error, DiskSpaceError) or not error.retryable:
                    raise error from exc
                attempt = 1 if progressed else attempt + 1
                if attempt >= self.max_attempts:
                    raise error from exc
                self._sleep_before_retry(job_id, job, attempt, str(error))

    def _stream(self, t: _Transfer, start: int) -> Iterator[int]:
        """GET from ``start``; writes to the part file and yields the bytes written so far
        in this attempt after each chunk."""
        headers = self.client.headers() | {"Accept-Encoding": "identity"}
        if start > 0:
            headers["Range"] = f"bytes={start}-"
        timeout = httpx2.Timeout(
            connect=min(self.stall_timeout, 30.0),
            read=self.stall_timeout,
            write=self.stall_timeout,
            pool=self.stall_timeout,
        )
        with get_session().stream(
            "GET", t.url, headers=headers, timeout=timeout, follow_redirects=True
        ) as response:
            if response.status_code == 416 and start > 0:
                # The range starts at or past the end: the server's file is shorter.
                _truncate(t.part)
                raise httpx2.RemoteProtocolError("the partial file is longer than the file")
            hf_raise_for_status(response)
            mode = "ab"
            if start > 0 and response.status_code != 206:
                mode, start = "wb", 0  # the server ignored the Range: start again
            written = start
            hasher = _HashPipe(t.part, start)
            try:
                with self._open_part(t.part, mode) as fh:
                    # Every chunk is written as it comes (a drop loses nothing), but the
                    # caller's per-report work (progress, speed, pause checks) runs once a
                    # MiB: that, not the socket, bounded the speed (0.72x curl before).
                    reported = written
                    for chunk in response.iter_raw():
                        fh.write(chunk)
                        hasher.put(chunk)
                        written += len(chunk)
                        if written > t.size > 0:
                            raise httpx2.RemoteProtocolError(
                                "the server sent more bytes than expected"
                            )
                        # ...and at once when the stream slows (a short read): the user
                        # sees where it stands, and a pause lands, before a stall.
                        if written - reported >= _REPORT_BYTES or len(chunk) < _SHORT_READ:
                            reported = written
                            yield written
                    if written != reported:
                        yield written
            finally:
                digest = hasher.finish()
            t.digest = digest if written == _size(t.part) else None

    def _open_part(self, path: Path, mode: str) -> BinaryIO:
        """The part file, opened for writing (a seam for tests that fill the disk)."""
        return cast(BinaryIO, open(path, mode, buffering=1 << 20))

    def _verify(self, t: _Transfer) -> tuple[str, bool]:
        got = _size(t.part)
        digest = t.digest if t.digest is not None else _sha256_file(t.part)
        if t.size and got != t.size:
            self._drop(t)
            raise ChecksumMismatchError(
                f"The download of {t.dest.name} has {got} bytes instead of {t.size}; it was "
                "deleted. Download it again."
            )
        if t.sha256 is not None and digest != t.sha256:
            self._drop(t)
            raise ChecksumMismatchError(
                f"The downloaded {t.dest.name} does not match the SHA-256 the Hub publishes "
                f"(expected {t.sha256[:12]}…, got {digest[:12]}…): it was deleted and not "
                "added to the library. Download it again."
            )
        return digest, t.sha256 is not None

    def _drop(self, t: _Transfer) -> None:
        for p in (t.part, t.sidecar):
            with contextlib.suppress(OSError):
                p.unlink()


class _HashPipe:
    """SHA-256 of a part file on a second thread while it is written (hashlib releases
    the GIL, so hashing overlaps the download): first the ``start`` bytes already on disk,
    then every chunk given to :meth:`put`."""

    def __init__(self, path: Path, start: int) -> None:
        self._queue: queue.Queue[bytes | None] = queue.Queue(maxsize=16)
        self._pending: list[bytes] = []
        self._pending_bytes = 0
        self._hash = hashlib.sha256()
        self._path, self._start = path, start
        self._thread = threading.Thread(target=self._run, name="llamadesk-sha256", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        if self._start:
            with open(self._path, "rb", buffering=0) as fh:
                left = self._start
                while left > 0:
                    data = fh.read(min(left, 4 << 20))
                    if not data:
                        break
                    self._hash.update(data)
                    left -= len(data)
        while (chunk := self._queue.get()) is not None:
            self._hash.update(chunk)

    def put(self, chunk: bytes) -> None:
        self._pending.append(chunk)
        self._pending_bytes += len(chunk)
        if self._pending_bytes >= 4 << 20:
            self._flush()

    def _flush(self) -> None:
        if self._pending:
            self._queue.put(b"".join(self._pending))
            self._pending, self._pending_bytes = [], 0

    def finish(self) -> str:
        self._flush()
        self._queue.put(None)
        self._thread.join()
        return self._hash.hexdigest()


class _Speed:
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
        data = _read_json(sidecar)
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
        folder = downloads_dir / request.repo_id.replace("/", "--")
        done = 0
        for remote in request.files:
            with contextlib.suppress(UnsafeFileNameError):
                done += _size(folder / (local_name(remote.path) + ".part"))
        known = [sizes.get(f.path) or f.size for f in request.files]
        total = sum(known) if all(k > 0 for k in known) else None
        out.append(PendingDownload(request, done, total))
    return out


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _truncate(path: Path) -> None:
    with contextlib.suppress(OSError):
        path.unlink()


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb", buffering=0) as fh:
        buf = bytearray(4 << 20)
        view = memoryview(buf)
        while n := fh.readinto(buf):
            h.update(view[:n])
    return h.hexdigest()


def _move(src: Path, dst: Path) -> None:
    try:
        os.replace(src, dst)
    except OSError as exc:
        if exc.errno != errno.EXDEV:
            raise
        tmp = dst.with_name(dst.name + ".incoming")
        shutil.copyfile(src, tmp)
        os.replace(tmp, dst)
        src.unlink()


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _mb(n: int) -> str:
    from app.settings_schema import format_bytes

    return format_bytes(max(n, 0))


__all__ = ["DownloadManager", "DownloadRequest", "JobStatus", "PendingDownload", "scan_pending"]
