"""A download queue for Hub files: resumable, verified, retried, on the hub's own threads.

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

Rooms: :mod:`.manager` (:class:`DownloadManager`: the queue and a job's steps),
:mod:`.jobs` (requests, job records, statuses), :mod:`.transfer` (one file's GET),
:mod:`.hashing` (SHA-256 while downloading), :mod:`.sidecars` (partial files and what
they are, :func:`scan_pending`), :mod:`.disk` (free space, checksums, the move into the
library). Which thread runs what: :mod:`app.hub.background`.
"""

from app.hub.download.jobs import DownloadRequest, JobStatus, State
from app.hub.download.manager import DownloadManager
from app.hub.download.sidecars import PendingDownload, scan_pending

__all__ = [
    "DownloadManager",
    "DownloadRequest",
    "JobStatus",
    "PendingDownload",
    "State",
    "scan_pending",
]
