"""Downloads against the fake Hub: verify, resume, retry, faults with sentences."""

from __future__ import annotations

import errno
import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

import pytest

from app.hub.client import HubClient, RemoteFile
from app.hub.download import DownloadManager, DownloadRequest, scan_pending
from app.hub.errors import UnsafeFileNameError
from app.hub.events import (
    Cancelled,
    Failed,
    Finished,
    Paused,
    Progress,
    Resumed,
    Retrying,
    Verified,
)
from tests.hub.conftest import Collector
from tests.hub.fake_hub import FakeHub, Fault

Make = Callable[..., tuple[DownloadManager, Collector]]
REPO = "acme/Tiny-GGUF"
NAME = "tiny-Q8_0.gguf"


def _request(hub: FakeHub, client: HubClient, name: str = NAME) -> DownloadRequest:
    details = client.details(REPO)
    (entry,) = details.find(filename=name)
    return DownloadRequest.of(REPO, entry)


@pytest.fixture
def repo(hub: FakeHub, tiny_gguf: Path) -> Path:
    hub.add_repo(REPO)
    hub.add_file(REPO, NAME, tiny_gguf)
    return tiny_gguf


def test_download_verifies_and_lands_in_library(
    hub: FakeHub, client: HubClient, make_manager: Make, repo: Path, tmp_path: Path
) -> None:
    manager, events = make_manager()
    job = manager.enqueue(_request(hub, client))
    end = events.end()
    assert isinstance(end, Finished), events.events
    assert end.path == (tmp_path / "library" / NAME).resolve()
    assert end.path.read_bytes() == repo.read_bytes()
    (verified,) = events.of(Verified)
    assert isinstance(verified, Verified) and verified.checked
    assert verified.sha256 == hashlib.sha256(repo.read_bytes()).hexdigest()
    assert events.of(Progress) and not list((tmp_path / "downloads").rglob("*.part*"))
    assert manager.status(job).state == "finished"
    # The bytes came from the CDN path the Hub redirected to.
    assert hub.cdn_requests(NAME)


def test_resume_after_drop_asks_only_for_the_rest(
    hub: FakeHub, client: HubClient, make_manager: Make, repo: Path
) -> None:
    hub.fault(REPO, NAME, Fault(drop_after=300_000))
    manager, events = make_manager()
    manager.enqueue(_request(hub, client))
    assert isinstance(events.end(), Finished), events.events
    assert events.of(Retrying)
    ranges = [r.headers.get("Range") for r in hub.cdn_requests(NAME) if r.method == "GET"]
    assert ranges == [None, "bytes=300000-"]


def test_resume_across_restart(
    hub: FakeHub, client: HubClient, make_manager: Make, repo: Path, tmp_path: Path
) -> None:
    hub.fault(REPO, NAME, Fault(drop_after=200_000, times=-1))
    first, events = make_manager(max_attempts=1)
    request = _request(hub, client)
    first.enqueue(request)
    failed = events.end()
    assert isinstance(failed, Failed) and failed.partial_kept, events.events
    assert "connection broke" in failed.message
    first.close()
    part = tmp_path / "downloads" / "acme--Tiny-GGUF" / (NAME + ".part")
    assert part.stat().st_size == 200_000 and part.with_name(part.name + ".json").exists()

    hub.faults.clear()
    second, events2 = make_manager()
    (pending,) = second.pending()
    assert pending == request
    second.enqueue(pending)
    assert isinstance(events2.end(), Finished), events2.events
    gets = [r.headers.get("Range") for r in hub.cdn_requests(NAME) if r.method == "GET"]
    assert gets[-1] == "bytes=200000-"


def test_changed_etag_starts_again(
    hub: FakeHub, client: HubClient, make_manager: Make, repo: Path, tmp_path: Path
) -> None:
    hub.fault(REPO, NAME, Fault(drop_after=100_000, times=-1))
    first, events = make_manager(max_attempts=1)
    request = _request(hub, client)
    first.enqueue(request)
    events.end()
    first.close()
    sidecar = tmp_path / "downloads" / "acme--Tiny-GGUF" / (NAME + ".part.json")
    sidecar.write_text(sidecar.read_text().replace('"etag": "', '"etag": "old'))
    hub.faults.clear()
    second, events2 = make_manager()
    second.enqueue(request)
    assert isinstance(events2.end(), Finished)
    assert [r.headers.get("Range") for r in hub.cdn_requests(NAME) if r.method == "GET"][-1] is None


def test_stall_is_retried(hub: FakeHub, client: HubClient, make_manager: Make, repo: Path) -> None:
    hub.fault(REPO, NAME, Fault(stall_after=100_000, stall_seconds=3.0))
    manager, events = make_manager(stall_timeout=0.5)
    manager.enqueue(_request(hub, client))
    assert isinstance(events.end(), Finished), events.events
    retry = events.of(Retrying)[0]
    assert isinstance(retry, Retrying) and "stalled" in retry.reason
    ranges = [r.headers.get("Range") for r in hub.cdn_requests(NAME) if r.method == "GET"]
    assert ranges == [None, "bytes=100000-"]


def test_wrong_checksum_deletes_and_says_so(
    hub: FakeHub, client: HubClient, make_manager: Make, repo: Path, tmp_path: Path
) -> None:
    hub.fault(REPO, NAME, Fault(wrong_bytes=True))
    manager, events = make_manager()
    manager.enqueue(_request(hub, client))
    end = events.end()
    assert isinstance(end, Failed) and not end.partial_kept
    assert "does not match the SHA-256" in end.message and "deleted" in end.message
    assert not (tmp_path / "library" / NAME).exists()
    assert not list((tmp_path / "downloads").rglob("*.part*"))


@pytest.mark.parametrize(
    ("fault", "expected"),
    [
        (Fault(status=401, gated=True, on_head=True), "accept the licence on the model page"),
        (Fault(status=403, gated=True, on_head=True), "accept the licence on the model page"),
        (Fault(status=404, on_head=True), "no file named"),
        (Fault(status=500, times=-1), "HTTP 500"),
        (Fault(status=403), "accept the licence on the model page"),
    ],
)
def test_http_faults_are_sentences(
    hub: FakeHub, client: HubClient, make_manager: Make, repo: Path, fault: Fault, expected: str
) -> None:
    request = _request(hub, client)
    hub.fault(REPO, NAME, fault)
    manager, events = make_manager(max_attempts=2)
    manager.enqueue(request)
    end = events.end()
    assert isinstance(end, Failed), events.events
    assert expected in end.message and "\n" not in end.message
    if fault.status == 500:
        assert events.of(Retrying)


def test_gated_repo_with_token(hub: FakeHub, tiny_gguf: Path, make_manager: Make) -> None:
    hub.token = "hf_secret_token"
    hub.add_repo("acme/Gated-GGUF", gated="manual")
    hub.add_file("acme/Gated-GGUF", NAME, tiny_gguf)
    anonymous = HubClient(hub.url)
    entry = anonymous.details("acme/Gated-GGUF").entries[0]
    manager, events = make_manager()
    manager.client = anonymous
    manager.enqueue(DownloadRequest.of("acme/Gated-GGUF", entry))
    end = events.end()
    assert isinstance(end, Failed) and "accept the licence" in end.message
    assert "hf_secret_token" not in end.message
    manager.client = HubClient(hub.url, token="hf_secret_token")
    manager.resume(end.job_id)
    assert isinstance(events.wait_for(lambda e: isinstance(e, Finished)), Finished)


def test_no_network(make_manager: Make, tmp_path: Path) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    manager, events = make_manager(max_attempts=2)
    manager.client = HubClient(f"http://127.0.0.1:{port}")
    manager.enqueue(DownloadRequest(REPO, (RemoteFile(NAME, 10, None),)))
    end = events.end()
    assert isinstance(end, Failed) and "cannot be reached" in end.message
    assert events.of(Retrying)


def test_unsafe_names_are_refused(make_manager: Make) -> None:
    manager, _ = make_manager()
    for bad in ("../evil.gguf", "a/../../evil.gguf", "/etc/evil.gguf", "a\\b.gguf", ".."):
        with pytest.raises(UnsafeFileNameError):
            manager.enqueue(DownloadRequest(REPO, (RemoteFile(bad, 10, None),)))


def test_not_enough_disk_space(
    hub: FakeHub, client: HubClient, make_manager: Make, repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import shutil

    real = shutil.disk_usage
    monkeypatch.setattr(
        "app.hub.download.disk.shutil.disk_usage", lambda p: real(p)._replace(free=1000)
    )
    manager, events = make_manager()
    manager.enqueue(_request(hub, client))
    end = events.end()
    assert isinstance(end, Failed) and "Not enough free disk space" in end.message
    assert not [r for r in hub.cdn_requests(NAME) if r.method == "GET"]  # nothing fetched


def test_disk_full_while_writing_keeps_the_part(
    hub: FakeHub, client: HubClient, make_manager: Make, repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ENOSPC is simulated by a writer that fails after 250 kB (no tmpfs mount here)."""

    class FullDisk:
        def __init__(self, fh: BinaryIO) -> None:
            self.fh = fh

        def write(self, data: bytes) -> int:
            if self.fh.tell() + len(data) > 250_000:
                raise OSError(errno.ENOSPC, "No space left on device")
            return self.fh.write(data)

        def __enter__(self) -> FullDisk:
            return self

        def __exit__(self, *exc: Any) -> None:
            self.fh.close()

    real_open = DownloadManager._open_part_on_hub_thread
    monkeypatch.setattr(
        DownloadManager,
        "_open_part_on_hub_thread",
        lambda self, p, m: FullDisk(real_open(self, p, m)),
    )
    manager, events = make_manager()
    job = manager.enqueue(_request(hub, client))
    end = events.end()
    assert isinstance(end, Failed) and end.partial_kept and "disk is full" in end.message
    monkeypatch.setattr(DownloadManager, "_open_part_on_hub_thread", real_open)
    manager.resume(job)
    assert isinstance(events.wait_for(lambda e: isinstance(e, Finished)), Finished)


def test_pause_resume_cancel(
    hub: FakeHub, client: HubClient, make_manager: Make, repo: Path, tmp_path: Path
) -> None:
    hub.fault(REPO, NAME, Fault(stall_after=200_000, stall_seconds=0.6, times=1))
    manager, events = make_manager(stall_timeout=5.0)
    job = manager.enqueue(_request(hub, client))
    events.wait_for(lambda e: isinstance(e, Progress) and e.done >= 200_000)
    manager.pause(job)
    paused = events.wait_for(lambda e: isinstance(e, Paused))
    assert isinstance(paused, Paused) and manager.status(job).state == "paused"
    part = tmp_path / "downloads" / "acme--Tiny-GGUF" / (NAME + ".part")
    assert part.exists()
    manager.resume(job)
    assert events.of(Resumed)
    assert isinstance(events.wait_for(lambda e: isinstance(e, Finished)), Finished)
    assert [r.headers.get("Range") for r in hub.cdn_requests(NAME)][-1] == "bytes=200000-"

    (tmp_path / "library" / NAME).unlink()
    hub.fault(REPO, NAME, Fault(stall_after=100_000, stall_seconds=0.6, times=1))
    job = manager.enqueue(_request(hub, client))
    events.wait_for(lambda e: isinstance(e, Progress) and e.done >= 100_000 and e.job_id == job)
    manager.cancel(job)
    events.wait_for(lambda e: isinstance(e, Cancelled))
    assert not part.exists() and not (tmp_path / "library" / NAME).exists()


def test_split_model_downloads_as_a_set(
    hub: FakeHub, client: HubClient, make_manager: Make, tiny_gguf: Path, tmp_path: Path
) -> None:
    hub.add_repo(REPO)
    names = [f"big-F16-0000{i}-of-00002.gguf" for i in (1, 2)]
    for n in names:
        hub.add_file(REPO, n, tiny_gguf)
    hub.fault(REPO, names[1], Fault(wrong_bytes=True))
    manager, events = make_manager()
    request = DownloadRequest.of(REPO, client.details(REPO).entries[0])
    manager.enqueue(request)
    end = events.end()
    # the second part was wrong: the first (verified) is not put in the library alone
    assert isinstance(end, Failed) and not list((tmp_path / "library").glob("*.gguf"))
    manager.enqueue(request)
    end = events.wait_for(lambda e: isinstance(e, Finished))
    assert isinstance(end, Finished) and [p.name for p in end.paths] == names
    assert end.path.name == names[0]


def test_adopted_download_of_an_earlier_run_is_paused_until_resumed(
    hub: FakeHub, client: HubClient, make_manager: Make, repo: Path, tmp_path: Path
) -> None:
    hub.fault(REPO, NAME, Fault(drop_after=250_000))
    first, events = make_manager(max_attempts=1)
    request = _request(hub, client)
    first.enqueue(request)
    assert isinstance(events.end(), Failed)
    first.close()
    # A corrupt sidecar beside it is skipped, not an error.
    (tmp_path / "downloads" / "x--y").mkdir()
    (tmp_path / "downloads" / "x--y" / "bad.gguf.part.json").write_text("{not json")

    (pending,) = scan_pending(tmp_path / "downloads")
    assert (pending.request, pending.done, pending.total) == (request, 250_000, repo.stat().st_size)
    second, events2 = make_manager()
    job = second.adopt(pending)
    status = second.status(job)
    assert (status.state, status.done, status.total) == ("paused", 250_000, repo.stat().st_size)
    gets = len(hub.cdn_requests(NAME))
    assert second.adopt(pending) == job and not events2.events  # nothing fetched, no events
    assert len(hub.cdn_requests(NAME)) == gets
    second.resume(job)
    assert isinstance(events2.end(), Finished), events2.events
    assert [r.headers.get("Range") for r in hub.cdn_requests(NAME)][-1] == "bytes=250000-"
    assert scan_pending(tmp_path / "downloads") == []


def test_pending_split_set_counts_every_part(
    hub: FakeHub, client: HubClient, make_manager: Make, tiny_gguf: Path, tmp_path: Path
) -> None:
    hub.add_repo(REPO)
    names = [f"big-F16-0000{i}-of-00002.gguf" for i in (1, 2)]
    for n in names:
        hub.add_file(REPO, n, tiny_gguf)
    hub.fault(REPO, names[1], Fault(drop_after=100_000))
    manager, events = make_manager(max_attempts=1)
    request = DownloadRequest.of(REPO, client.details(REPO).entries[0])
    manager.enqueue(request)
    assert isinstance(events.end(), Failed)
    manager.close()
    (pending,) = scan_pending(tmp_path / "downloads")
    size = tiny_gguf.stat().st_size
    assert pending.request == request
    assert (pending.done, pending.total) == (size + 100_000, 2 * size)
