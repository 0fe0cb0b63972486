"""What the download queue holds: requests, their jobs and the status a caller reads."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from app.hub.client import GGUFEntry, RemoteFile

State = Literal["queued", "running", "paused", "finished", "failed", "cancelled"]
StopReason = Literal["pause", "cancel", "close"]


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


class StopJob(Exception):
    """Raised on the download thread where a running job notices a pause, cancel or close."""

    def __init__(self, why: StopReason) -> None:
        super().__init__(why)
        self.why: StopReason = why


@dataclass
class Job:
    """A job's record, changed under the manager's lock by both threads."""

    request: DownloadRequest
    state: State = "queued"
    done: int = 0
    total: int | None = None
    message: str | None = None
    stop: StopReason | None = None  # set by the caller's thread, seen by the download thread
    wake: threading.Event = field(default_factory=threading.Event)  # cuts a retry's wait short

    def check(self) -> None:
        """Raise :class:`StopJob` if a pause, cancel or close was asked for."""
        if self.stop is not None:
            raise StopJob(self.stop)
