"""The download queue: one job at a time on the hub's download thread, with pause, resume,
cancel, retries with backoff, and verification before a file enters the library.

Threads (see :mod:`app.hub.background`): the public methods run on the caller's thread and
only change job records under the lock; methods whose names end in ``_on_hub_thread`` run
on the manager's download thread. Events are emitted from the download thread for a
running job and from the caller's thread for what a call decides at once (``Queued``,
``Resumed``, and ``Paused``/``Cancelled`` of a job that was not running).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO, TypeVar, cast

import httpx2

from app.fsutil import make_private_dir
from app.hub import config
from app.hub.background import HubWorker
from app.hub.client import FileMetadata, HubClient, RemoteFile
from app.hub.download.disk import (
    check_space,
    file_size,
    move_into_place,
    remove_quietly,
    sha256_file,
)
from app.hub.download.jobs import DownloadRequest, Job, JobStatus, StopJob
from app.hub.download.sidecars import (
    PendingDownload,
    part_path,
    read_json,
    scan_pending,
    sidecar_of,
    write_sidecar,
)
from app.hub.download.transfer import Speed, Transfer, sha_like, stream_to_part
from app.hub.errors import ChecksumMismatchError, DiskSpaceError, HubError, describe
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

T = TypeVar("T")


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
        self._jobs: dict[str, Job] = {}
        self._closed = False
        self._hub_thread = HubWorker("llamadesk-downloads")
        self._hash_thread = HubWorker("llamadesk-sha256")

    # Public API (the caller's thread) ------------------------------------------------------

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
            self._jobs[job_id] = Job(request, total=request.total)
        self._emit(Queued(job_id, tuple(f.path for f in request.files), request.total))
        self._start(job_id)
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
        self._start(job_id)

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
                self._jobs[job_id] = Job(
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
        deadline = time.monotonic() + timeout
        self._hub_thread.close(timeout)
        # The hash thread is idle once the download thread has stopped; if that did not
        # happen in time, neither waits longer (both are daemons).
        self._hash_thread.close(max(0.0, deadline - time.monotonic()))

    # Either thread -------------------------------------------------------------------------

    def _start(self, job_id: str) -> None:
        """Hand a queued job to the download thread (jobs run in the order handed over)."""
        with self._lock:
            if self._closed:
                return
            self._hub_thread.submit(functools.partial(self._run_job_on_hub_thread, job_id))

    def _emit(self, event: DownloadEvent) -> None:
        with self._lock:
            subscribers = list(self._subscribers)
        for callback in subscribers:
            try:
                callback(event)
            except Exception:
                log.exception("download event handler failed")

    def _part_path(self, request: DownloadRequest, remote: RemoteFile) -> Path:
        return part_path(self.downloads_dir, request.repo_id, remote.path)

    def _discard(self, request: DownloadRequest) -> None:
        for remote in request.files:
            part = self._part_path(request, remote)
            remove_quietly(part)
            remove_quietly(sidecar_of(part))

    # The download thread -------------------------------------------------------------------

    def _run_job_on_hub_thread(self, job_id: str) -> None:
        with self._lock:
            job = self._jobs.get(job_id)
            if job is None or job.state != "queued" or self._closed:
                return  # paused, cancelled or handed over twice while it waited
            job.state = "running"
        try:
            paths = self._download_on_hub_thread(job_id, job)
        except StopJob as stop:
            with self._lock:
                job.stop = None
                job.state = "cancelled" if stop.why == "cancel" else "paused"
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

    def _download_on_hub_thread(self, job_id: str, job: Job) -> list[Path]:
        request = job.request
        dest_dir = (request.dest_dir or self.library_dir).expanduser()
        dest_dir.mkdir(parents=True, exist_ok=True)
        transfers: list[Transfer] = []
        for remote in request.files:
            dest = inside(dest_dir, remote.path)
            part = self._part_path(request, remote)
            make_private_dir(part.parent)
            meta: FileMetadata = self._with_retries_on_hub_thread(
                job_id, job, functools.partial(self._head_on_hub_thread, request, remote), remote
            )
            size = meta.size if meta.size is not None else remote.size
            sha = sha_like(remote.sha256) or sha_like(meta.etag)
            transfer = Transfer(
                remote, part, sidecar_of(part), dest, size, sha, meta.etag, meta.url
            )
            self._reconcile_on_hub_thread(request, transfer)
            transfers.append(transfer)

        # Files already in the library with the right checksum are not fetched again.
        todo: list[Transfer] = []
        for t in transfers:
            if t.dest.exists():
                if t.sha256 and t.dest.stat().st_size == t.size and sha256_file(t.dest) == t.sha256:
                    continue
                raise HubError(
                    f"A different file named {t.dest.name} is already in {dest_dir}: move it "
                    "away or download to another folder."
                )
            todo.append(t)

        total = sum(t.size for t in transfers)
        have = sum(file_size(t.part) for t in todo) + sum(
            t.size for t in transfers if t not in todo
        )
        with self._lock:
            job.total, job.done = total, have
        if todo:
            check_space(
                sum(t.size - file_size(t.part) for t in todo),
                self.downloads_dir,
                dest_dir,
                sum(t.size for t in todo),
                todo[0].dest.name,
            )
        self._emit(Started(job_id, have, total))

        done_before = sum(t.size for t in transfers if t not in todo)
        for t in todo:
            self._fetch_on_hub_thread(job_id, job, t, done_before, total)
            digest, checked = self._verify_on_hub_thread(t)
            self._emit(Verified(job_id, t.remote.path, digest, checked))
            done_before += t.size

        # All parts verified: move them into the library together.
        for t in todo:
            move_into_place(t.part, t.dest)
            remove_quietly(t.sidecar)
        if todo:
            with contextlib.suppress(OSError):
                todo[0].part.parent.rmdir()
        return [t.dest for t in transfers]

    def _head_on_hub_thread(self, request: DownloadRequest, remote: RemoteFile) -> FileMetadata:
        return self.client.file_metadata(request.repo_id, remote.path, request.revision)

    def _reconcile_on_hub_thread(self, request: DownloadRequest, t: Transfer) -> None:
        """Keep a partial file only if it is of the same file (ETag and size)."""
        old = read_json(t.sidecar)
        same = (
            old is not None
            and old.get("etag") == t.etag
            and old.get("size") == t.size
            and old.get("path") == t.remote.path
        )
        if not same or file_size(t.part) > t.size:
            remove_quietly(t.part)
        write_sidecar(
            t.sidecar, request, t.remote, url=t.url, size=t.size, etag=t.etag, sha256=t.sha256
        )

    def _with_retries_on_hub_thread(
        self, job_id: str, job: Job, action: Callable[[], T], remote: RemoteFile
    ) -> T:
        attempt = 0
        while True:
            job.check()
            try:
                return action()
            except StopJob:
                raise
            except Exception as exc:
                error = describe(exc, job.request.repo_id, remote.path)
                attempt += 1
                if not error.retryable or attempt >= self.max_attempts:
                    raise error from exc
                self._sleep_before_retry_on_hub_thread(job_id, job, attempt, str(error))

    def _sleep_before_retry_on_hub_thread(
        self, job_id: str, job: Job, attempt: int, reason: str
    ) -> None:
        delay = min(self.max_backoff, self.backoff * 2 ** (attempt - 1))
        self._emit(Retrying(job_id, attempt, reason, delay))
        job.wake.wait(delay)
        job.check()

    def _fetch_on_hub_thread(
        self, job_id: str, job: Job, t: Transfer, before: int, total: int
    ) -> None:
        """Bring ``t.part`` to ``t.size`` bytes, resuming and retrying."""
        attempt = 0
        speed = Speed()
        last_emit = 0.0
        while True:
            job.check()
            start = file_size(t.part)
            if start >= t.size > 0:
                return
            progressed = False
            try:
                chunks = stream_to_part(
                    t,
                    start,
                    headers=self.client.headers(),
                    stall_timeout=self.stall_timeout,
                    open_part=self._open_part_on_hub_thread,
                    hash_worker=self._hash_thread,
                )
                for chunk_bytes in chunks:
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
                    job.check()
                got = file_size(t.part)
                if t.size and got < t.size:
                    raise httpx2.RemoteProtocolError(
                        f"the server closed the connection after {got} of {t.size} bytes"
                    )
                rate = speed.rate()
                with self._lock:
                    job.done = before + got
                self._emit(Progress(job_id, before + got, total, rate, 0.0, t.remote.path))
                return
            except StopJob:
                raise
            except Exception as exc:
                error = describe(exc, job.request.repo_id, t.remote.path)
                if isinstance(error, DiskSpaceError) or not error.retryable:
                    raise error from exc
                attempt = 1 if progressed else attempt + 1
                if attempt >= self.max_attempts:
                    raise error from exc
                self._sleep_before_retry_on_hub_thread(job_id, job, attempt, str(error))

    def _open_part_on_hub_thread(self, path: Path, mode: str) -> BinaryIO:
        """The part file, opened for writing (a seam for tests that fill the disk)."""
        return cast(BinaryIO, open(path, mode, buffering=1 << 20))

    def _verify_on_hub_thread(self, t: Transfer) -> tuple[str, bool]:
        got = file_size(t.part)
        digest = t.digest if t.digest is not None else sha256_file(t.part)
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

    @staticmethod
    def _drop(t: Transfer) -> None:
        remove_quietly(t.part)
        remove_quietly(t.sidecar)
