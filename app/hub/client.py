"""Search the Hub for GGUF models and read a repository's GGUF files (no Qt, no llama_cpp).

Everything goes through ``huggingface_hub``'s own client: :class:`HfApi` for search
(``list_models``), model info (licence, gated) and the file tree (LFS sizes and SHA-256),
``get_hf_file_metadata`` for a file's ETag, size and download location, and its shared
HTTP session for the bytes, so an endpoint setting or ``HF_ENDPOINT`` points all of it at a
mirror.
"""

from __future__ import annotations

import dataclasses
import os
import re
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

import httpx2
from huggingface_hub import HfApi, get_hf_file_metadata, hf_hub_url
from huggingface_hub.hf_api import RepoFile

# From the defining modules: huggingface_hub.utils re-exports them only implicitly.
from huggingface_hub.utils._headers import build_hf_headers
from huggingface_hub.utils._http import get_session, hf_raise_for_status

from app.hub import config
from app.hub.errors import HubError, NoGGUFFilesError, describe
from app.hub.files import check_repo_path, is_gguf, is_projector, quantization, split_name

Sort = Literal["downloads", "likes", "last_modified"]

_SHA256 = re.compile(r"^[0-9a-f]{64}$")


@dataclass(frozen=True)
class RepoSummary:
    """One search result."""

    repo_id: str
    downloads: int
    likes: int
    last_modified: datetime | None
    gated: bool | str  # False, "auto" or "manual"
    private: bool
    license: str | None
    tags: tuple[str, ...]


@dataclass(frozen=True)
class RemoteFile:
    """One file of a repository: its size and (for LFS files) the SHA-256 the Hub publishes."""

    path: str
    size: int
    sha256: str | None


@dataclass(frozen=True)
class GGUFEntry:
    """A model a user can pick: one file, or all parts of a split model as one entry."""

    quant: str
    files: tuple[RemoteFile, ...]  # parts in order; one element for a single file

    @property
    def name(self) -> str:
        """The first file: the one llama.cpp loads."""
        return self.files[0].path

    @property
    def size(self) -> int:
        return sum(f.size for f in self.files)

    @property
    def is_split(self) -> bool:
        return len(self.files) > 1


@dataclass(frozen=True)
class RepoDetails:
    repo_id: str
    revision: str  # the commit, when the Hub says it
    license: str | None
    gated: bool | str
    private: bool
    entries: tuple[GGUFEntry, ...]  # by quantization label, then name
    projectors: tuple[RemoteFile, ...] = ()  # mmproj files (vision), not models of their own
    incomplete_splits: tuple[str, ...] = field(default=())  # split sets with parts missing

    def by_quant(self) -> dict[str, list[GGUFEntry]]:
        groups: dict[str, list[GGUFEntry]] = {}
        for entry in self.entries:
            groups.setdefault(entry.quant, []).append(entry)
        return groups

    def find(self, quant: str | None = None, filename: str | None = None) -> list[GGUFEntry]:
        if filename is not None:
            return [e for e in self.entries if filename in {f.path for f in e.files}] or [
                e for e in self.entries if os.path.basename(e.name) == filename
            ]
        if quant is not None:
            return [e for e in self.entries if e.quant.upper() == quant.upper()]
        return list(self.entries)


@dataclass(frozen=True)
class FileMetadata:
    """What a HEAD of the file's resolve URL says."""

    url: str  # the resolve URL (redirects to the CDN are followed when downloading)
    etag: str | None
    size: int | None
    commit: str | None


def _license(tags: Iterable[str] | None, card: Any) -> str | None:
    value = None
    if card is not None:
        value = card.get("license") if hasattr(card, "get") else getattr(card, "license", None)
    if isinstance(value, str) and value:
        return value
    for tag in tags or ():
        if tag.startswith("license:"):
            return tag.split(":", 1)[1]
    return None


def group_files(files: Iterable[RemoteFile]) -> tuple[list[GGUFEntry], list[RemoteFile], list[str]]:
    """GGUF files as entries: split parts joined (only complete sets), projectors apart."""
    singles: list[GGUFEntry] = []
    projectors: list[RemoteFile] = []
    sets: dict[tuple[str, int], dict[int, RemoteFile]] = {}
    for f in files:
        if not is_gguf(f.path):
            continue
        if is_projector(f.path):
            projectors.append(f)
            continue
        split = split_name(f.path)
        if split is None:
            singles.append(GGUFEntry(quantization(f.path), (f,)))
        else:
            sets.setdefault((split.base, split.count), {})[split.part] = f
    incomplete: list[str] = []
    for (base, count), parts in sets.items():
        if sorted(parts) != list(range(1, count + 1)):
            incomplete.append(f"{base} ({len(parts)} of {count} parts)")
            continue
        ordered = tuple(parts[i] for i in range(1, count + 1))
        singles.append(GGUFEntry(quantization(ordered[0].path), ordered))
    singles.sort(key=lambda e: (e.quant, e.name))
    return singles, projectors, incomplete


class HubClient:
    """The Hub's API for this app. ``token`` None = anonymous (huggingface_hub's own stored
    login is never picked up implicitly).

    Without an explicit ``endpoint`` the address is :func:`app.hub.config.endpoint` read at
    each use, not a copy made here: a change in Preferences reaches a long-lived client
    (the download manager's) at its next request, as it reaches search.
    """

    def __init__(
        self, endpoint: str | None = None, token: str | None = None, *, timeout: float = 20.0
    ) -> None:
        self._explicit = endpoint
        self._token: str | bool = token or False
        self.timeout = timeout
        self._api: HfApi | None = None

    @property
    def endpoint(self) -> str:
        """The Hub address in use now (see :func:`app.hub.config.resolve_endpoint`)."""
        return config.endpoint(self._explicit)

    @property
    def api(self) -> HfApi:
        """``HfApi`` for the current address (a new one when the address changed)."""
        address = self.endpoint
        if self._api is None or self._api.endpoint != address:
            self._api = HfApi(endpoint=address, token=self._token)
        return self._api

    @property
    def has_token(self) -> bool:
        return bool(self._token)

    def headers(self) -> dict[str, str]:
        """The request headers huggingface_hub sends (user agent, Authorization)."""
        return dict(build_hf_headers(token=self._token, library_name="llamadesk"))

    # Search and details -------------------------------------------------------------------

    def search(
        self, query: str = "", *, sort: Sort = "downloads", limit: int = 30
    ) -> list[RepoSummary]:
        """Repositories with GGUF files matching ``query``, most downloaded / liked /
        recently updated first."""
        try:
            models = list(
                self.api.list_models(
                    search=query or None, filter="gguf", sort=sort, limit=limit, full=True
                )
            )
        except Exception as exc:
            raise describe(exc, f"the search for {query!r}") from exc
        return [
            RepoSummary(
                repo_id=m.id,
                downloads=int(m.downloads or 0),
                likes=int(m.likes or 0),
                last_modified=m.last_modified,
                gated=m.gated if m.gated is not None else False,
                private=bool(m.private),
                license=_license(m.tags, m.card_data),
                tags=tuple(m.tags or ()),
            )
            for m in models
        ]

    def details(self, repo_id: str, revision: str = "main") -> RepoDetails:
        """Licence, gated status and the GGUF files grouped by quantization. Raises
        :class:`NoGGUFFilesError` for a repository without GGUF files."""
        try:
            info = self.api.model_info(repo_id, revision=revision)
            tree = [
                item
                for item in self.api.list_repo_tree(repo_id, revision=revision, recursive=True)
                if isinstance(item, RepoFile)
            ]
        except Exception as exc:
            raise describe(exc, repo_id) from exc
        files = []
        for item in tree:
            sha = item.lfs.sha256 if item.lfs is not None else None
            size = item.lfs.size if item.lfs is not None else item.size
            files.append(
                RemoteFile(item.path, int(size), sha if sha and _SHA256.match(sha) else None)
            )
        entries, projectors, incomplete = group_files(files)
        if not entries:
            raise NoGGUFFilesError(
                f"{repo_id} has no GGUF files, which is the only format LlamaDesk loads: "
                'search for a repository with "GGUF" in its name (often a quantized copy).'
            )
        return RepoDetails(
            repo_id=repo_id,
            revision=info.sha or revision,
            license=_license(info.tags, info.card_data),
            gated=info.gated if info.gated is not None else False,
            private=bool(info.private),
            entries=tuple(entries),
            projectors=tuple(projectors),
            incomplete_splits=tuple(incomplete),
        )

    # Files --------------------------------------------------------------------------------

    def url(self, repo_id: str, filename: str, revision: str = "main") -> str:
        return hf_hub_url(
            repo_id, check_repo_path(filename), revision=revision, endpoint=self.endpoint
        )

    def file_metadata(self, repo_id: str, filename: str, revision: str = "main") -> FileMetadata:
        address = self.endpoint  # read once: the URL and the redirects agree
        url = hf_hub_url(repo_id, check_repo_path(filename), revision=revision, endpoint=address)
        try:
            meta = get_hf_file_metadata(
                url,
                token=self._token,
                timeout=self.timeout,
                library_name="llamadesk",
                endpoint=address,
            )
        except Exception as exc:
            raise describe(exc, repo_id, filename) from exc
        return FileMetadata(url=url, etag=meta.etag, size=meta.size, commit=meta.commit_hash)

    def fetch_prefix(
        self, repo_id: str, filename: str, n_bytes: int, revision: str = "main"
    ) -> bytes:
        """The first ``n_bytes`` of a file (a Range request), e.g. a GGUF header."""
        headers = self.headers() | {
            "Range": f"bytes=0-{n_bytes - 1}",
            "Accept-Encoding": "identity",
        }
        try:
            response = get_session().get(
                self.url(repo_id, filename, revision),
                headers=headers,
                follow_redirects=True,
                timeout=httpx2.Timeout(self.timeout),
            )
            hf_raise_for_status(response)
        except Exception as exc:
            raise describe(exc, repo_id, filename) from exc
        return response.content[:n_bytes]

    def remote_model_info(
        self,
        repo_id: str,
        entry: GGUFEntry,
        revision: str = "main",
        *,
        first: int = 4 << 20,
        most: int = 64 << 20,
    ) -> Any:
        """The engine's :class:`~app.engine.metadata.ModelInfo` of a remote file, from its
        first few MB only (doubled while the header is longer). ``size_bytes`` is the whole
        entry's size; ``path`` is ``hf://repo/file``."""
        from app.engine.errors import ModelLoadError
        from app.engine.gguf_header import GGUFHeaderError
        from app.engine.metadata import read_model_info

        n = first
        while True:
            data = self.fetch_prefix(
                repo_id, entry.name, min(n, entry.files[0].size or n), revision
            )
            fd, tmp = tempfile.mkstemp(suffix=".gguf", prefix="llamadesk-header-")
            try:
                with os.fdopen(fd, "wb") as fh:
                    fh.write(data)
                try:
                    info = read_model_info(tmp, check_loadable=False)
                except ModelLoadError as exc:
                    cause = exc.__cause__
                    truncated = isinstance(cause, GGUFHeaderError) and cause.kind == "truncated"
                    if truncated and len(data) >= n and n < most:
                        n *= 2
                        continue
                    raise HubError(f"The header of {entry.name} cannot be read: {exc}") from exc
            finally:
                os.unlink(tmp)
            return dataclasses.replace(
                info, size_bytes=entry.size, path=f"hf://{repo_id}/{entry.name}"
            )
