"""One source of the Hub address: a change in Preferences reaches a running download
manager's next download, as it reaches search (issue 20, item 4)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from app.hub.client import HubClient
from app.hub.download import DownloadManager, DownloadRequest
from app.hub.events import Finished
from app.storage.settings import AppSettings, save_settings
from tests.hub.conftest import Collector
from tests.hub.fake_hub import FakeHub

REPO = "acme/Tiny-GGUF"
NAME = "tiny-Q8_0.gguf"


@pytest.fixture
def two_hubs(tiny_gguf: Path) -> Iterator[tuple[FakeHub, FakeHub]]:
    hubs = (FakeHub().start(), FakeHub().start())
    for hub in hubs:
        hub.add_repo(REPO)
        hub.add_file(REPO, NAME, tiny_gguf)
    yield hubs
    for hub in hubs:
        hub.stop()


def test_downloads_follow_the_address_saved_after_start(
    two_hubs: tuple[FakeHub, FakeHub], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("HF_ENDPOINT", raising=False)
    first, second = two_hubs
    save_settings(AppSettings(hub_endpoint=first.url))
    client = HubClient(timeout=5.0)  # no explicit address: the setting's, at each use
    (tmp_path / "downloads").mkdir()
    events = Collector()
    manager = DownloadManager(
        client,
        downloads_dir=tmp_path / "downloads",
        library_dir=tmp_path / "library",
        progress_interval=0.0,
        on_event=events,
    )
    try:
        (entry,) = client.details(REPO).find(filename=NAME)
        manager.enqueue(DownloadRequest.of(REPO, entry))
        assert isinstance(events.end(), Finished), events.events
        assert first.cdn_requests(NAME) and not second.cdn_requests(NAME)

        # Preferences save a new address while the manager lives on.
        save_settings(AppSettings(hub_endpoint=second.url))
        assert client.endpoint == second.url
        (tmp_path / "library" / NAME).unlink()
        before = len(first.requests)
        manager.enqueue(DownloadRequest.of(REPO, entry))
        events.wait_for(lambda _e: len(events.of(Finished)) == 2)
        assert second.cdn_requests(NAME), "the download went to the address saved last"
        assert len(first.requests) == before, "nothing more reached the old address"
        # Search reads the same source.
        assert [r.repo_id for r in client.search("Tiny")] == [REPO]
        assert len(first.requests) == before
    finally:
        manager.close()


def test_an_explicit_address_stays(two_hubs: tuple[FakeHub, FakeHub]) -> None:
    first, second = two_hubs
    save_settings(AppSettings(hub_endpoint=second.url))
    client = HubClient(first.url)  # `llamadesk pull --endpoint`: the argument wins
    assert client.endpoint == first.url
    assert client.api.endpoint == first.url
