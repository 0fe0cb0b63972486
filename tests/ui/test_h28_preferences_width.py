"""Preferences is wide enough for its sections (issue 28, item 6): every tab, "Tools (MCP)"
last, is on the tab bar without its scroll arrows. The real window's dialog, offscreen."""

from __future__ import annotations

from typing import Any


def test_every_section_tab_is_in_view(qtbot: Any, make_window: Any) -> None:
    window, _ = make_window(model=None)
    dialog = window.open_preferences()
    qtbot.waitUntil(dialog.isVisible, timeout=5000)
    qtbot.wait(50)
    bar = dialog.tabs.tabBar()
    texts = [bar.tabText(i) for i in range(bar.count())]
    assert texts[-1] == "Tools (MCP)"
    for i in range(bar.count()):
        rect = bar.tabRect(i)
        assert rect.left() >= 0 and rect.right() < bar.width(), (texts[i], rect, bar.width())
        assert bar.tabText(i) == texts[i] and "…" not in bar.tabText(i)
    assert dialog.width() <= dialog.screen().availableGeometry().width()
