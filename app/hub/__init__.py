"""Hugging Face Hub: search GGUF models, estimate their fit, download them (no Qt).

- :mod:`app.hub.client`: :class:`HubClient` (search, repository details, file metadata,
  a remote file's header as the engine's ModelInfo).
- :mod:`app.hub.fit`: fit verdicts ("fits" / "tight" / "will not fit").
- :mod:`app.hub.download`: :class:`DownloadManager` and its events (:mod:`app.hub.events`).
- :mod:`app.hub.config`: endpoint setting, folders, the token store.
- :mod:`app.hub.catalog`: the curated first-start list.
- :mod:`app.hub.background`: the hub's one background primitive (:class:`HubWorker`) and
  which thread runs what.
"""

from app.hub.client import GGUFEntry, HubClient, RemoteFile, RepoDetails, RepoSummary
from app.hub.download import DownloadManager, DownloadRequest, JobStatus
from app.hub.errors import HubError, NoGGUFFilesError, UnsafeFileNameError
from app.hub.fit import FitEstimate, available_memory, estimate

__all__ = [
    "DownloadManager",
    "DownloadRequest",
    "FitEstimate",
    "GGUFEntry",
    "HubClient",
    "HubError",
    "JobStatus",
    "NoGGUFFilesError",
    "RemoteFile",
    "RepoDetails",
    "RepoSummary",
    "UnsafeFileNameError",
    "available_memory",
    "estimate",
]
