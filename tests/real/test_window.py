"""The window (offscreen Qt, the real MainWindow as tests/ui builds it) on SmolLM2: two tabs
streaming at once, then regenerate, edit a message, fork, close a tab and open it again,
each checked in the stored conversation (SQLite) and in what the view shows; then the
window closes and a new one opens the same tabs.

Replies are greedy. The two tabs' first replies ran in one batch, so they are checked by
logits within a tolerance against a one-sequence run (tests/real/logit_check.py).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
from PySide6.QtCore import Qt  # noqa: TID251 (the window test of tests/real)
from PySide6.QtGui import QTextDocument  # noqa: TID251

from tests.real.logit_check import assert_greedy_within, solo_engine
from tests.ui.conftest import Recorder, send, set_sampling, wait_idle

pytestmark = pytest.mark.timeout(300)

MAX_TOKENS = 24
# Questions SmolLM2 answers at length: greedy replies run to MAX_TOKENS, so the two tabs
# are still streaming when both have started.
FIRST = "Write a short story about a cat who learns to fly."
SECOND = "Explain how a bicycle works, step by step."


def plain(html: str) -> str:
    """What a message label's rich text reads as."""
    doc = QTextDocument()
    doc.setHtml(html)
    return doc.toPlainText()


def words(text: str) -> list[str]:
    """The words of a message's Markdown source (list markers are drawn, not text)."""
    return re.findall(r"\w+", re.sub(r"(?m)^\s*(\d+\.|[-*+])\s+", "", text))


def shown(tab: Any) -> list[tuple[str, str]]:
    """What the tab's view shows: (role, text) of each message widget, after checking
    that its labels, as drawn, read the same words as that text."""
    messages = tab.view.messages()
    for w in messages:
        drawn = " ".join(plain(label.text()) for label in w.labels())
        assert words(drawn) == words(w.data.content), (drawn, w.data.content)
    return [(w.data.role, w.data.content) for w in messages]


def stored(window: Any, tab: Any) -> list[tuple[str, str]]:
    """The conversation's current branch as SQLite holds it."""
    return [(m.role, m.content) for m in window.db.get_thread(tab.cid)]


def greedy(tab: Any) -> None:
    set_sampling(tab, temperature=0.0, max_tokens=MAX_TOKENS, seed=1)


def test_two_tabs_then_regenerate_edit_fork_close_and_reopen(
    qtbot: Any, make_window: Callable[..., tuple[Any, Recorder]], smollm2: Any
) -> None:
    window, rec = make_window()
    first = window.new_tab()
    greedy(first)
    send(qtbot, first, FIRST)
    second = window.new_tab()
    greedy(second)
    send(qtbot, second, SECOND)
    c1, c2 = wait_idle(qtbot, first, 60000), wait_idle(qtbot, second, 60000)
    # both streamed at once: the second tab's text began before the first's ended
    order = [cid for cid, _ in rec.tokens]
    last_first = len(order) - 1 - order[::-1].index(first.cid)
    assert order.index(second.cid) < last_first
    for tab, question, c in ((first, FIRST, c1), (second, SECOND, c2)):
        assert c.finish_reason in ("eog", "length") and 0 < c.n_tokens <= MAX_TOKENS
        assert rec.texts(tab.cid) == c.text
        assert stored(window, tab) == [("user", question), ("assistant", c.text)]
        window.tab_widget.setCurrentWidget(tab)
        assert shown(tab) == stored(window, tab)
    with solo_engine(smollm2) as reference:
        for question, c in ((FIRST, c1), (SECOND, c2)):
            messages = [{"role": "user", "content": question}]
            assert_greedy_within(reference, messages, c.text, ended=c.finish_reason == "eog")

    # regenerate the first tab's reply: a sibling, shown as 2/2, the prompt from the cache
    window.tab_widget.setCurrentWidget(first)
    reply = first.branch[-1]
    qtbot.mouseClick(first.view.widget_for(reply.id).regen_button, Qt.MouseButton.LeftButton)
    regen = wait_idle(qtbot, first, 60000)
    assert regen.n_prompt_processed <= 2
    new_reply = first.branch[-1]
    assert new_reply.id != reply.id and new_reply.parent_id == reply.parent_id
    assert window.db.sibling_position(new_reply.id) == (2, 2)
    assert first.view.last().sibling_label.text() == "2/2"
    assert stored(window, first) == [("user", FIRST), ("assistant", regen.text)]
    assert shown(first) == stored(window, first)

    # edit the question: a sibling user message and a new reply to it
    user = first.branch[0]
    qtbot.mouseClick(first.view.widget_for(user.id).edit_button, Qt.MouseButton.LeftButton)
    assert first.composer.toPlainText() == FIRST and first.edit_banner.isVisible()
    edited = "Write a short story about a dog who learns to swim."
    first.composer.setPlainText(edited)
    qtbot.keyClick(first.composer, Qt.Key.Key_Return)
    after_edit = wait_idle(qtbot, first, 60000)
    assert window.db.sibling_position(first.branch[0].id) == (2, 2)
    assert stored(window, first) == [("user", edited), ("assistant", after_edit.text)]
    assert shown(first) == stored(window, first)
    assert not first.edit_banner.isVisible()

    # fork the second tab at its reply: a new tab with a copy of the cached prefix
    window.tab_widget.setCurrentWidget(second)
    fork_at = second.branch[-1]
    qtbot.mouseClick(second.view.widget_for(fork_at.id).fork_button, Qt.MouseButton.LeftButton)
    fork = window.current_tab()
    assert fork is not second and fork.cid != second.cid
    assert stored(window, fork) == stored(window, second)
    qtbot.waitUntil(lambda: fork.info.forked is True, timeout=10000)
    greedy(fork)
    send(qtbot, fork, "Now say it in one sentence.")
    forked = wait_idle(qtbot, fork, 60000)
    assert forked.n_prompt_processed < forked.n_prompt  # the copied prefix was not re-read
    assert stored(window, fork)[-2:] == [
        ("user", "Now say it in one sentence."),
        ("assistant", forked.text),
    ]
    assert shown(fork) == stored(window, fork)
    assert len(stored(window, second)) == 2  # the source is untouched

    # close the first tab, then open its conversation again from the list
    before = stored(window, first)
    window.close_tab(window.tab_widget.indexOf(first))
    assert window.tab_for(first.cid) is None
    cid = first.cid
    window.open_conversation(cid)
    reopened = window.tab_for(cid)
    assert reopened is not None and window.current_tab() is reopened
    assert stored(window, reopened) == before and shown(reopened) == before
    greedy(reopened)
    send(qtbot, reopened, "Give it a title.")
    again = wait_idle(qtbot, reopened, 60000)
    assert again.finish_reason in ("eog", "length") and again.text
    # the closed tab's cache was kept: only the new message was read
    assert again.n_prompt_processed < again.n_prompt - after_edit.n_prompt
    assert stored(window, reopened) == [
        *before,
        ("user", "Give it a title."),
        ("assistant", again.text),
    ]
    assert shown(reopened) == stored(window, reopened)

    # close the window; the next start reopens the same tabs, showing what SQLite holds
    tabs_before = [t.cid for t in window.tabs()]
    window.close()
    qtbot.waitUntil(window.is_shut_down, timeout=10000)
    window2, _ = make_window(write=False)
    assert [t.cid for t in window2.tabs()] == tabs_before
    for tab in window2.tabs():
        window2.tab_widget.setCurrentWidget(tab)
        assert stored(window2, tab) and shown(tab) == stored(window2, tab)
