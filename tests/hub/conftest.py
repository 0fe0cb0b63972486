"""A fake Hub per test, serving tiny GGUF files written on the spot."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from app.hub.client import HubClient
from app.hub.download import DownloadManager
from app.hub.events import Cancelled, DownloadEvent, Failed, Finished
from tests.hub.fake_hub import FakeHub
from tests.support.gguf_models import TinySpec, write_tiny_model


@pytest.fixture(scope="session")
def tiny_gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # ~1.5 MB: large enough for drops and stalls in the middle
    return write_tiny_model(
        tmp_path_factory.mktemp("hub") / "tiny.gguf", TinySpec(n_embd=256, n_ff=512, n_layer=2)
    )


@pytest.fixture
def hub() -> Iterator[FakeHub]:
    server = FakeHub().start()
    yield server
    server.stop()


@pytest.fixture
def client(hub: FakeHub) -> HubClient:
    return HubClient(hub.url, timeout=5.0)


class Collector:
    """Collects a manager's events and waits for a job's end."""

    def __init__(self) -> None:
        self.events: list[DownloadEvent] = []
        self._cond = threading.Condition()

    def __call__(self, event: DownloadEvent) -> None:
        with self._cond:
            self.events.append(event)
            self._cond.notify_all()

    def of(self, kind: type[DownloadEvent]) -> list[DownloadEvent]:
        with self._cond:
            return [e for e in self.events if isinstance(e, kind)]

    def wait_for(
        self, predicate: Callable[[DownloadEvent], bool], timeout: float = 20.0
    ) -> DownloadEvent:
        with self._cond:
            seen = 0
            while True:
                for e in self.events[seen:]:
                    if predicate(e):
                        return e
                seen = len(self.events)
                if not self._cond.wait(timeout):
                    raise AssertionError(f"timed out; events: {self.events}")

    def end(self, timeout: float = 20.0) -> DownloadEvent:
        return self.wait_for(lambda e: isinstance(e, Finished | Failed | Cancelled), timeout)


@pytest.fixture
def make_manager(
    client: HubClient, tmp_path: Path
) -> Iterator[Callable[..., tuple[DownloadManager, Collector]]]:
    made: list[DownloadManager] = []

    def make(**kwargs: object) -> tuple[DownloadManager, Collector]:
        collector = Collector()
        options: dict[str, object] = {
            "downloads_dir": tmp_path / "downloads",
            "library_dir": tmp_path / "library",
            "stall_timeout": 1.0,
            "backoff": 0.05,
            "max_attempts": 4,
            "progress_interval": 0.0,
        }
        options.update(kwargs)
        (tmp_path / "downloads").mkdir(exist_ok=True)
        manager = DownloadManager(client, on_event=collector, **options)  # type: ignore[arg-type]
        made.append(manager)
        return manager, collector

    yield make
    for m in made:
        m.close()
