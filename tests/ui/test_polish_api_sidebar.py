"""API conversations in the window's sidebar as soon as they are stored (issue 20, item 6):
a real HTTP client names a conversation on the window's own server; the list shows it,
and its later turns refresh its row, without a restart or a manual refresh."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx2
import pytest

from app.server.app_settings import ServerAppSettings
from app.ui.server_controller import ServerState
from tests.ui.conftest import WORDS_GRAMMAR

pytestmark = pytest.mark.qt_log_ignore(r"This plugin does not support")


def listed(window: Any) -> dict[int, str]:
    return {r.conversation_id: r.subtitle for r in window.sidebar.model.rows}


def test_an_api_conversation_is_listed_when_it_is_stored(qtbot: Any, make_window: Any) -> None:
    window, _ = make_window()
    controller = window.server
    controller.update_settings(ServerAppSettings(port=0))
    controller.start()
    qtbot.waitUntil(lambda: controller.status.state is not ServerState.STARTING, timeout=10000)
    assert controller.running, controller.status.message
    before = set(listed(window))

    def chat(messages: list[dict[str, str]]) -> dict[str, Any]:
        response = httpx2.post(
            f"{controller.url}/v1/chat/completions",
            json={
                "messages": messages,
                "max_tokens": 3,
                "temperature": 0,
                "conversation": "from-a-client",
                "grammar": WORDS_GRAMMAR,
            },
            timeout=30,
        )
        response.raise_for_status()
        body: dict[str, Any] = response.json()
        return body

    pool = ThreadPoolExecutor(max_workers=1)
    try:
        first = pool.submit(chat, [{"role": "user", "content": "hello"}])
        qtbot.waitUntil(first.done, timeout=30000)
        reply = first.result()["choices"][0]["message"]["content"]
        qtbot.waitUntil(lambda: len(set(listed(window)) - before) == 1, timeout=5000)
        (cid,) = set(listed(window)) - before
        assert window.db.get_conversation(cid).sampling["api_conversation"] == "from-a-client"
        assert listed(window)[cid].endswith("2 messages")
        # the next turn of the same conversation refreshes its row
        later = [
            {"role": "user", "content": "hello"},
            {"role": "assistant", "content": reply},
            {"role": "user", "content": "and again"},
        ]
        second = pool.submit(chat, later)
        qtbot.waitUntil(second.done, timeout=30000)
        second.result()
        qtbot.waitUntil(lambda: listed(window)[cid].endswith("4 messages"), timeout=5000)
    finally:
        pool.shutdown(wait=True)
        controller.stop()
        qtbot.waitUntil(lambda: controller.status.state is ServerState.STOPPED, timeout=10000)


def test_a_burst_of_stored_turns_queries_the_list_once(
    qtbot: Any, make_window: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from app.session import events as ev
    from app.ui.door import library
    from app.ui.sidebar import BACKGROUND_REFRESH_MS

    window, _ = make_window()
    door = library(window.session)  # the sidebar lists through the session's library
    queries: list[int] = []
    real = door.listing

    def counted(*args: Any, **kwargs: Any) -> Any:
        queries.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(door, "listing", counted)
    cid = window.db.create_conversation("From a script").id
    window.db.append_message(cid, "user", "hello from a script")
    for _ in range(5):  # a client storing turns back to back, 180 ms apart
        window._on_session_event(ev.ConversationStored(cid, created=False))
        qtbot.wait(180)
    qtbot.waitUntil(lambda: bool(queries), timeout=BACKGROUND_REFRESH_MS * 3)
    qtbot.wait(BACKGROUND_REFRESH_MS + 200)
    assert len(queries) == 1  # the list was queried once for the burst, not per turn
    assert cid in listed(window)
