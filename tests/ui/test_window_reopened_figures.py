"""Issue 20's figures after a restart and the window's geometry: the reply reserve is shown
after reopening, the list that comes back keeps a usable width, and streamed lines never
overlap."""

from __future__ import annotations

import itertools
from typing import Any

from tests.ui.conftest import ENDLESS_GRAMMAR, close_window, send, set_sampling, wait_idle


def test_the_reply_reserve_is_shown_after_reopening(qtbot: Any, make_window: Any) -> None:
    window, _ = make_window()
    tab = window.new_tab()
    assert tab is not None
    set_sampling(tab, max_tokens=100)
    send(qtbot, tab, "hello there")
    wait_idle(qtbot, tab)
    close_window(qtbot, window)
    window2, _ = make_window(write=False)
    reopened = window2.tab_for(tab.cid)
    assert reopened is not None
    # before any new turn: the figure says what the next reply keeps free
    try:
        qtbot.waitUntil(
            lambda: "100 are kept free for the reply" in reopened.meter.toolTip(), timeout=10000
        )
    except Exception:
        raise AssertionError((reopened.meter.toolTip(), reopened.info)) from None
    assert reopened.meter.value() == reopened.meter.held() + 100


def test_the_list_comes_back_at_a_usable_width(qtbot: Any, make_window: Any) -> None:
    window, _ = make_window()
    window.resize(1100, 700)
    qtbot.waitUntil(lambda: window.width() >= 1000, timeout=3000)
    sizes = window.splitter.sizes()
    window.splitter.setSizes([1, sum(sizes) - 1])  # dragged almost shut
    window.resize(700, 700)
    qtbot.waitUntil(lambda: window.sidebar.isHidden(), timeout=3000)
    window.resize(1100, 700)
    qtbot.waitUntil(window.sidebar.isVisible, timeout=3000)
    qtbot.waitUntil(lambda: window.sidebar.width() >= 180, timeout=3000)
    window.sidebar_action.trigger()
    window.sidebar_action.trigger()
    assert window.sidebar.width() >= 180


def test_streamed_lines_never_overlap(qtbot: Any, make_window: Any) -> None:
    window, _ = make_window()
    tab = window.new_tab()
    assert tab is not None
    set_sampling(tab, max_tokens=400, grammar=ENDLESS_GRAMMAR)
    send(qtbot, tab, "write")
    qtbot.waitUntil(lambda: tab.generating, timeout=5000)

    def check() -> None:
        widgets = tab.view.messages()
        assert len(widgets) >= 2
        tops = [w.geometry() for w in widgets]
        for above, below in itertools.pairwise(tops):
            assert above.bottom() < below.top(), (above, below)
        labels = [lab for lab in widgets[-1].labels() if lab.isVisible()]
        for above, below in itertools.pairwise(labels):
            assert above.geometry().bottom() < below.geometry().top()
            assert above.height() >= above.heightForWidth(above.width())

    seen = 0
    while tab.generating and seen < 40:
        qtbot.wait(50)
        check()
        seen += 1
    wait_idle(qtbot, tab)
    qtbot.wait(100)
    check()
