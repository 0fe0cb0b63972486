"""No light strip in dark mode (issue 20, item 6): the real window, grabbed in the states a
user sees (welcome, a chat with messages, its settings open, a notice, many tabs, narrow),
has no row or column band of light (light-palette) pixels at any edge or between panes."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from PySide6.QtGui import QImage

from app.ui.theme import apply_theme
from tests.ui.conftest import WORDS_GRAMMAR, send, wait_idle

pytestmark = pytest.mark.qt_log_ignore(r"This plugin does not support")

LIGHT = 190  # HSL lightness 0-255: the light palette's window (#efefef) and base (white)
BAND = 48  # px in a row: longer than any glyph run of light text


@pytest.fixture(autouse=True)
def back_to_the_system_theme() -> Iterator[None]:
    yield
    apply_theme("system")  # the palette is the application's: later tests get theirs


def light_bands(image: QImage) -> list[tuple[str, int, int]]:
    """("row", y, x) / ("column", x, y) where BAND light pixels in a line begin."""
    found: list[tuple[str, int, int]] = []
    width, height = image.width(), image.height()

    def light(x: int, y: int) -> bool:
        return image.pixelColor(x, y).lightness() > LIGHT

    for y in range(height):
        run = 0
        for x in range(width):
            run = run + 1 if light(x, y) else 0
            if run == BAND:
                found.append(("row", y, x - BAND + 1))
                break
    for x in range(0, width, 2):
        run = 0
        for y in range(height):
            run = run + 1 if light(x, y) else 0
            if run == BAND:
                found.append(("column", x, y - BAND + 1))
                break
    return found


def assert_dark(qtbot: Any, window: Any, state: str) -> None:
    qtbot.wait(100)  # laid out and painted
    bands = light_bands(window.grab().toImage())
    assert not bands, f"{state}: light bands at {bands[:5]}"


def test_the_dark_window_has_no_light_band(qtbot: Any, make_window: Any) -> None:
    window, _ = make_window(theme="dark")
    window.resize(1100, 720)
    assert_dark(qtbot, window, "welcome")
    tab = window.new_tab()
    assert tab is not None
    assert_dark(qtbot, window, "a new chat")
    sampling = {**tab.conversation.sampling, "grammar": WORDS_GRAMMAR, "max_tokens": 4}
    tab.host.db.update_conversation_settings(tab.cid, sampling=sampling)
    tab.conversation = tab.host.db.get_conversation(tab.cid)
    send(qtbot, tab, "hello in the dark")
    wait_idle(qtbot, tab)
    assert_dark(qtbot, window, "a chat")
    tab.settings_button.setChecked(True)
    assert_dark(qtbot, window, "conversation settings open")
    tab.settings_button.setChecked(False)
    window.show_message("A notice about the window.")
    tab.notify("A notice in the tab.", error=False)
    assert_dark(qtbot, window, "notices")
    for _ in range(8):
        window.new_tab()
    assert_dark(qtbot, window, "many tabs")
    window.resize(640, 520)
    assert_dark(qtbot, window, "narrow")
    # light to dark while running: nothing keeps the light palette (the notice shown in
    # light mode kept its light base colour: a white strip above the status bar)
    window.set_theme("light")
    window.show_message("A notice shown in light mode.")
    qtbot.wait(50)
    assert light_bands(window.grab().toImage())  # the check sees a light window
    window.set_theme("dark")
    window.resize(1100, 720)
    assert_dark(qtbot, window, "switched to dark")
