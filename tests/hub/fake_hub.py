"""A local fake of the Hugging Face Hub: the routes huggingface_hub and the downloader use.

- ``GET /api/models?search=&filter=gguf&sort=&limit=``: search (JSON list)
- ``GET /api/models/{repo}[/revision/{rev}]``: model info (gated, private, tags, cardData)
- ``GET /api/models/{repo}/tree/{rev}[/{path}]?recursive=``: files with LFS sha256/size
- ``HEAD|GET /{repo}/resolve/{rev}/{path}``: 302 to ``/cdn/{repo}/{path}`` with
  X-Repo-Commit, X-Linked-Etag (the sha256) and X-Linked-Size, as the Hub does for LFS files
- ``HEAD|GET /cdn/{repo}/{path}``: the bytes, with ETag, Accept-Ranges, ``Range`` -> 206

Faults (per file, :class:`Fault`): drop the connection after N bytes, stall after N bytes,
an HTTP status (401, 403 gated, 404, 500) for the next ``times`` requests, wrong bytes.
Every request is recorded (method, path, headers) in :attr:`FakeHub.requests`.
"""

from __future__ import annotations

import hashlib
import json
import socket
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, BinaryIO
from urllib.parse import parse_qs, quote, unquote, urlsplit

COMMIT = "0123456789abcdef0123456789abcdef01234567"


@dataclass
class Fault:
    drop_after: int | None = None  # close the connection after this many body bytes
    stall_after: int | None = None  # stop sending (for ``stall_seconds``) after this many
    stall_seconds: float = 5.0
    status: int | None = None  # answer this status instead (resolve/cdn)
    gated: bool = False  # with status 401/403: X-Error-Code GatedRepo
    wrong_bytes: bool = False  # serve other bytes than the published sha256
    times: int = 1  # how many requests the fault applies to (-1 = always)
    on_head: bool = False  # also apply ``status`` to HEAD requests


@dataclass
class FakeFile:
    path: str
    source: Path  # the file on disk
    size: int
    sha256: str
    lfs: bool = True


@dataclass
class FakeRepo:
    repo_id: str
    files: dict[str, FakeFile] = field(default_factory=dict)
    gated: bool | str = False
    private: bool = False
    license: str | None = "apache-2.0"
    downloads: int = 0
    likes: int = 0
    last_modified: str = "2025-01-01T00:00:00.000Z"
    tags: list[str] = field(default_factory=lambda: ["gguf"])


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


class FakeHub:
    def __init__(self, token: str | None = None, rate: float | None = None) -> None:
        self.repos: dict[str, FakeRepo] = {}
        self.rate = rate  # bytes per second for file bodies (None: as fast as it goes)
        self.faults: dict[tuple[str, str], Fault] = {}
        self.requests: list[Request] = []
        self.token = token  # required for gated/private repos when set
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> FakeHub:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def add_repo(self, repo_id: str, **kwargs: Any) -> FakeRepo:
        repo = FakeRepo(repo_id, **kwargs)
        self.repos[repo_id] = repo
        return repo

    def add_file(
        self, repo_id: str, path: str, source: Path, *, sha256: str | None = None, lfs: bool = True
    ) -> FakeFile:
        f = FakeFile(path, source, source.stat().st_size, sha256 or _sha256(source), lfs)
        self.repos[repo_id].files[path] = f
        return f

    def fault(self, repo_id: str, path: str, fault: Fault) -> None:
        self.faults[(repo_id, path)] = fault

    def take_fault(self, repo_id: str, path: str, head: bool = False) -> Fault | None:
        with self._lock:
            fault = self.faults.get((repo_id, path))
            if fault is None or fault.times == 0:
                return None
            if head and not (fault.on_head and fault.status):
                return None
            if fault.times > 0:
                fault.times -= 1
            return fault

    def cdn_requests(self, path: str) -> list[Request]:
        return [r for r in self.requests if r.path.startswith("/cdn/") and r.path.endswith(path)]


def _paced(sock: socket.socket, fh: BinaryIO, start: int, length: int, rate: float) -> None:
    """Send ``length`` bytes from ``start`` at about ``rate`` bytes a second (a real
    connection's pace, for benchmarks that measure the app over a whole download)."""
    began = time.monotonic()
    sent = 0
    step = max(16 << 10, int(rate / 50))  # ~50 sends a second
    while sent < length:
        n = min(step, length - sent)
        sock.sendfile(fh, start + sent, n)
        sent += n
        ahead = sent / rate - (time.monotonic() - began)
        if ahead > 0:
            time.sleep(ahead)


def _handler(hub: FakeHub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        # Helpers ------------------------------------------------------------------------

        def _json(
            self, data: Any, status: int = 200, headers: dict[str, str] | None = None
        ) -> None:
            body = json.dumps(data).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def _error(self, status: int, code: str | None = None, message: str = "error") -> None:
            headers = {"X-Error-Message": message}
            if code:
                headers["X-Error-Code"] = code
            self._json({"error": message}, status, headers)

        def _authorized(self, repo: FakeRepo) -> bool:
            if not (repo.gated or repo.private) or hub.token is None:
                return True
            return self.headers.get("Authorization") == f"Bearer {hub.token}"

        def _record(self) -> None:
            with hub._lock:
                hub.requests.append(Request(self.command, self.path, dict(self.headers.items())))

        def _split_repo(self, rest: str) -> tuple[FakeRepo | None, str]:
            parts = rest.split("/", 2)
            if len(parts) < 2:
                return None, ""
            repo = hub.repos.get(f"{parts[0]}/{parts[1]}")
            return repo, parts[2] if len(parts) > 2 else ""

        # Routes -------------------------------------------------------------------------

        def do_HEAD(self) -> None:
            self._route()

        def do_GET(self) -> None:
            self._route()

        def _route(self) -> None:
            self._record()
            url = urlsplit(self.path)
            path = unquote(url.path)
            query = parse_qs(url.query)
            if path == "/api/models":
                return self._search(query)
            if path.startswith("/api/models/"):
                return self._api_model(path[len("/api/models/") :], query)
            if path.startswith("/cdn/"):
                return self._cdn(path[len("/cdn/") :])
            repo, rest = self._split_repo(path.lstrip("/"))
            if repo is not None and rest.startswith("resolve/"):
                _, _rev, filename = rest.split("/", 2)
                return self._resolve(repo, filename)
            return self._error(404, "RepoNotFound", "Repository not found")

        def _model_json(self, repo: FakeRepo) -> dict[str, Any]:
            tags = list(repo.tags) + ([f"license:{repo.license}"] if repo.license else [])
            return {
                "id": repo.repo_id,
                "_id": repo.repo_id,
                "author": repo.repo_id.split("/")[0],
                "sha": COMMIT,
                "gated": repo.gated,
                "private": repo.private,
                "downloads": repo.downloads,
                "likes": repo.likes,
                "lastModified": repo.last_modified,
                "tags": tags,
                "library_name": "gguf" if "gguf" in repo.tags else None,
                "cardData": {"license": repo.license} if repo.license else {},
                "siblings": [{"rfilename": p} for p in repo.files],
            }

        def _search(self, query: dict[str, list[str]]) -> None:
            repos = list(hub.repos.values())
            for wanted in query.get("filter", []):
                repos = [r for r in repos if wanted in r.tags]
            text = (query.get("search") or [""])[0].lower()
            if text:
                repos = [r for r in repos if text in r.repo_id.lower()]
            sort = (query.get("sort") or ["downloads"])[0]
            key = {"downloads": "downloads", "likes": "likes", "lastModified": "last_modified"}
            attr = key.get(sort, "downloads")
            repos.sort(key=lambda r: getattr(r, attr), reverse=True)
            limit = int((query.get("limit") or ["1000"])[0])
            self._json([self._model_json(r) for r in repos[:limit]])

        def _api_model(self, rest: str, query: dict[str, list[str]]) -> None:
            repo, tail = self._split_repo(rest)
            if repo is None:
                return self._error(401, "RepoNotFound", "Repository not found")
            if repo.private and not self._authorized(repo):
                return self._error(401, "RepoNotFound", "Repository not found")
            if tail.startswith("tree/"):
                parts = tail.split("/", 2)
                prefix = parts[2] if len(parts) > 2 else ""
                files = [f for p, f in repo.files.items() if p.startswith(prefix)]
                out: list[dict[str, Any]] = []
                for f in files:
                    item: dict[str, Any] = {
                        "type": "file",
                        "oid": hashlib.sha1(f.path.encode()).hexdigest(),
                        "size": 134 if f.lfs else f.size,
                        "path": f.path,
                    }
                    if f.lfs:
                        item["lfs"] = {"oid": f.sha256, "size": f.size, "pointerSize": 134}
                    out.append(item)
                return self._json(out)
            return self._json(self._model_json(repo))

        def _resolve(self, repo: FakeRepo, filename: str) -> None:
            f = repo.files.get(filename)
            fault = (
                hub.take_fault(repo.repo_id, filename, head=self.command == "HEAD")
                if (self.command == "HEAD")
                else None
            )
            if fault is not None and fault.status:
                return self._fault_status(fault)
            if not self._authorized(repo):
                status = 401 if self.headers.get("Authorization") is None else 403
                return self._error(status, "GatedRepo", "Access to this model is restricted")
            if f is None:
                return self._error(404, "EntryNotFound", "Entry not found")
            etag = f'"{f.sha256}"' if f.lfs else f'"{hashlib.sha1(f.path.encode()).hexdigest()}"'
            headers = {
                "X-Repo-Commit": COMMIT,
                "ETag": etag,
                "X-Linked-Etag": etag,
                "X-Linked-Size": str(f.size),
                "Location": f"{hub.url}/cdn/{repo.repo_id}/{quote(filename)}",
                "Content-Length": "0",
            }
            self.send_response(302)
            for k, v in headers.items():
                self.send_header(k, v)
            self.end_headers()

        def _fault_status(self, fault: Fault) -> None:
            status = fault.status or 500
            if fault.gated:
                return self._error(status, "GatedRepo", "Access to this model is restricted")
            if status == 404:
                return self._error(404, "EntryNotFound", "Entry not found")
            return self._error(status, None, "fault")

        def _cdn(self, rest: str) -> None:
            repo, filename = self._split_repo(rest)
            if repo is None or filename not in repo.files:
                return self._error(404)
            f = repo.files[filename]
            fault = hub.take_fault(repo.repo_id, filename) if self.command == "GET" else None
            if fault is not None and fault.status:
                return self._fault_status(fault)
            start, end = 0, f.size - 1
            status = 200
            rng = self.headers.get("Range")
            if rng and rng.startswith("bytes="):
                first, _, last = rng[6:].partition("-")
                start = int(first or 0)
                end = int(last) if last else f.size - 1
                if start >= f.size:
                    self.send_response(416)
                    self.send_header("Content-Range", f"bytes */{f.size}")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                status = 206
            length = end - start + 1
            self.send_response(status)
            self.send_header("Content-Length", str(length))
            self.send_header("Accept-Ranges", "bytes")
            self.send_header("ETag", f'"{f.sha256}"')
            self.send_header("Content-Type", "application/octet-stream")
            if status == 206:
                self.send_header("Content-Range", f"bytes {start}-{end}/{f.size}")
            self.end_headers()
            if self.command == "HEAD":
                return
            limit = length
            if fault is not None and fault.drop_after is not None:
                limit = min(limit, max(0, fault.drop_after - start))
            stall_at = None
            if fault is not None and fault.stall_after is not None:
                stall_at = max(0, fault.stall_after - start)
            with open(f.source, "rb") as fh:
                if fault is None and hub.rate:
                    self.wfile.flush()
                    _paced(self.connection, fh, start, length, hub.rate)
                    return
                if fault is None:
                    self.wfile.flush()
                    self.connection.sendfile(fh, start, length)
                    return
                fh.seek(start)
                sent = 0
                while sent < limit:
                    n = min(64 << 10, limit - sent)
                    if stall_at is not None and sent < stall_at <= sent + n:
                        n = stall_at - sent
                    data = fh.read(n)
                    if fault.wrong_bytes:
                        data = bytes(b ^ 0xFF for b in data)
                    self.wfile.write(data)
                    sent += len(data)
                    if stall_at is not None and sent == stall_at:
                        self.wfile.flush()
                        time.sleep(fault.stall_seconds)
                        stall_at = None
                        self.close_connection = True
                        return
            if limit < length:
                self.wfile.flush()
                self.close_connection = True
                try:
                    self.connection.shutdown(2)
                except OSError:
                    pass

    return Handler


__all__ = ["COMMIT", "FakeHub", "Fault"]
