"""Fixtures of the session tests: a state store and sessions on the tiny models."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from app.engine import ContextSettings
from app.session import Session
from app.session import events as ev
from app.storage import Database, StateStore
from tests.session.test_session import CONTEXT, Recorder


@pytest.fixture
def store(tmp_path: Path) -> StateStore:
    return StateStore(tmp_path / "states")


@pytest.fixture
def make_session(store: StateStore) -> Iterator[Callable[..., tuple[Session, Recorder]]]:
    opened: list[Session] = []

    def make(
        model: Path | None = None,
        settings: ContextSettings = CONTEXT,
        database: Database | None = None,
    ) -> tuple[Session, Recorder]:
        session = Session(store, database)
        recorder = Recorder(session)
        opened.append(session)
        if model is not None:
            session.load_model(str(model), settings)
            recorder.wait(
                lambda: bool(
                    recorder.session_of(ev.ModelLoaded) or recorder.session_of(ev.ModelLoadFailed)
                )
            )
            assert recorder.session_of(ev.ModelLoaded), recorder.session_events
        return session, recorder

    yield make
    for session in opened:
        session.shutdown()
        assert session.join(10.0)
