"""Switching to Dark while running (issue 28, item 6): the code blocks and inline code of a
long reply already on screen take the dark colours, not only its last (live) label.

A long reply is shown in frozen chunks (stream_chunks.py) whose HTML was rendered with the
light theme's colours; they stayed white with near-white text until a restart."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from app.ui.chat_view import ChatView, MessageData
from app.ui.theme import (
    DARK_CHAT,
    DARK_CODE_BG,
    LIGHT_CHAT,
    LIGHT_CODE_BG,
    apply_theme,
)
from tests.ui.conftest import settle
from tests.ui.test_polish_dark_mode import light_bands

pytestmark = pytest.mark.qt_log_ignore(r"This plugin does not support")

BLOCK = "Here is `inline` code and a block:\n\n```python\nprint(1)\n```\n\n" + "word " * 40
REPLY = "\n\n".join([BLOCK] * 6)


@pytest.fixture(autouse=True)
def back_to_the_system_theme() -> Iterator[None]:
    apply_theme("light")
    yield
    apply_theme("system")


def streamed_view(qtbot: Any) -> ChatView:
    view = ChatView()
    qtbot.addWidget(view)
    view.resize(800, 600)
    view.show()
    view.append(MessageData(1, "user", "show me `code`"))
    reply = view.append(MessageData(2, "assistant", ""))
    reply.set_streaming(True)
    for end in range(0, len(REPLY) + 1, 97):  # streamed in pieces, as the engine sends
        reply.set_reply(REPLY[:end], "", None)
    reply.set_reply(REPLY, "", None)
    reply.set_streaming(False)
    settle()
    return view


def test_code_on_screen_restyles_when_the_theme_switches_to_dark(qtbot: Any) -> None:
    view = streamed_view(qtbot)
    reply = view.messages()[1]
    assert len(reply.labels()) > 2  # the case: frozen chunks before the live label
    for label in reply.labels():
        if "<pre" in label.text():
            assert LIGHT_CODE_BG in label.text()

    apply_theme("dark")
    settle()

    for widget in view.messages():
        for label in widget.labels():
            text = label.text()
            assert LIGHT_CODE_BG not in text, text[:200]
            assert LIGHT_CHAT.inline_code_bg not in text, text[:200]
            if "<code" in text:
                assert DARK_CHAT.inline_code_bg in text
            if "<pre" in text:
                assert DARK_CODE_BG in text
    view.scroll_to_end()
    settle()
    bands = light_bands(view.grab().toImage())
    assert not bands, f"light bands after the switch at {bands[:5]}"

    apply_theme("light")  # and back
    settle()
    for label in reply.labels():
        assert DARK_CODE_BG not in label.text()
