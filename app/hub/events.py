"""What a :class:`~app.hub.download.DownloadManager` reports, as frozen dataclasses.

A running job's events come from the manager's download thread, those a call decides at
once (``Queued``, ``Resumed``, ``Paused``/``Cancelled`` of a job not running) from the
caller's thread (see :mod:`app.hub.background`); a GUI marshals them to its own thread.
Every job ends with exactly one of :class:`Finished`, :class:`Failed` or
:class:`Cancelled` (a paused job ends later, when resumed).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class DownloadEvent:
    job_id: str


@dataclass(frozen=True)
class Queued(DownloadEvent):
    files: tuple[str, ...]
    total: int | None  # bytes of all parts, when known


@dataclass(frozen=True)
class Started(DownloadEvent):
    done: int  # bytes already on disk from an earlier attempt or run
    total: int


@dataclass(frozen=True)
class Progress(DownloadEvent):
    done: int
    total: int
    speed: float  # bytes per second, smoothed
    eta: float | None  # seconds, None while the speed is unknown
    filename: str


@dataclass(frozen=True)
class Paused(DownloadEvent):
    done: int
    total: int


@dataclass(frozen=True)
class Resumed(DownloadEvent):
    pass


@dataclass(frozen=True)
class Retrying(DownloadEvent):
    attempt: int  # 1 for the first retry
    reason: str  # a sentence
    delay: float  # seconds before the next attempt


@dataclass(frozen=True)
class Verified(DownloadEvent):
    filename: str
    sha256: str
    checked: bool  # False when the Hub publishes no SHA-256 (the size was checked)


@dataclass(frozen=True)
class Finished(DownloadEvent):
    path: Path  # the file to load (the first part of a split model)
    paths: tuple[Path, ...]


@dataclass(frozen=True)
class Failed(DownloadEvent):
    message: str  # a sentence
    partial_kept: bool  # True: resume continues from the bytes on disk


@dataclass(frozen=True)
class Cancelled(DownloadEvent):
    pass
