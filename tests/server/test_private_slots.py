"""Slot files (``POST /slots/{id}?action=save``) are owner-only, in an owner-only
``states/slots/`` - also when an older version left that folder open."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import httpx2

from app.server import ServerConfig
from tests.server.conftest import MakeServer
from tests.server.test_slots import HISTORY, named_chat, slot_of


def test_a_saved_slot_is_owner_only(make_server: MakeServer, tmp_path: Path) -> None:
    slots = tmp_path / "home0" / "states" / "slots"
    slots.mkdir(parents=True)
    slots.chmod(0o755)  # as an older version left it
    runner = make_server(ServerConfig(port=0, parallel=2, max_resident=2))
    with httpx2.Client(base_url=runner.url, timeout=60) as http:
        named_chat(http, HISTORY, "private")
        index = slot_of(http, "private")["index"]
        saved = http.post(f"/slots/{index}?action=save", json={"filename": "private.bin"})
        assert saved.status_code == 200, saved.text
    assert stat.S_IMODE(os.stat(slots).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(slots / "private.bin").st_mode) == 0o600
    assert stat.S_IMODE(os.stat(slots.parent).st_mode) == 0o700
