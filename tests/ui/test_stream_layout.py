"""What one flush of streamed text costs the window's layout (issue 20 item 3), counted,
not timed: the reply's frozen labels are not asked for heights and do not move, the live
label is laid out once per flush, several streamed pieces between two flushes are one
layout, and the flushes come on the screen's frames at a readable pace."""

from __future__ import annotations

import itertools
import random
from collections.abc import Sequence
from typing import Any

import pytest
from PySide6.QtCore import QEvent, QObject, QRect
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QLabel

from app.ui.chat_view import ChatView, MessageData, MessageWidget, TextLabel
from app.ui.frame_pace import READ_INTERVAL_MS, FramePace
from app.ui.tab_reply import ReplyBuffer
from tests.ui.conftest import ENDLESS_GRAMMAR, send, settle


class Words:
    """Reply-like text: words, sentences, now and then a paragraph (a fixed seed)."""

    def __init__(self) -> None:
        self.rnd = random.Random(7)
        self.text = ""

    def more(self, n: int) -> str:
        for _ in range(n):
            word = "".join(
                self.rnd.choice("abcdefghijklmnop") for _ in range(self.rnd.randint(1, 7))
            )
            self.text += word + (". " if self.rnd.random() < 0.1 else " ")
            if self.rnd.random() < 0.01:
                self.text += "\n\n"
        return self.text


def flush(view: ChatView, widget: MessageWidget, text: str) -> None:
    """What the tab's flush does with new text (ChatTab.flush)."""
    widget.set_content(text)
    view.fit_to_text()
    settle()


def streaming_reply(view: ChatView, words: Words, chars: int) -> MessageWidget:
    view.set_messages([MessageData(1, "user", "Write a long story.")])
    reply = view.append(MessageData(2, "assistant", ""))
    reply.set_streaming(True)
    while len(words.text) < chars:
        flush(view, reply, words.more(4))
    # the scroll bar came meanwhile (a narrower column): let the cuts be redone for it
    QTest.qWait(200)
    settle()
    return reply


class Moves(QObject):
    def __init__(self) -> None:
        super().__init__()
        self.events: list[tuple[QObject, QEvent.Type]] = []

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if event.type() in (QEvent.Type.Move, QEvent.Type.Resize, QEvent.Type.LayoutRequest):
            self.events.append((watched, event.type()))
        return False


def assert_no_overlap(labels: Sequence[QLabel]) -> None:
    rects: list[QRect] = [label.geometry() for label in labels if label.isVisible()]
    for above, below in itertools.pairwise(rects):
        assert above.bottom() < below.top(), (above, below)


def test_frozen_labels_are_neither_asked_nor_moved_while_a_reply_streams(view: ChatView) -> None:
    words = Words()
    reply = streaming_reply(view, words, 3000)
    frozen = reply.labels()[:-1]
    assert len(frozen) >= 3
    assert all(isinstance(label, TextLabel) and label.pinned() for label in frozen)

    # a pinned label's height is fixed: layouts do not ask it for one
    assert not any(label.hasHeightForWidth() for label in frozen)
    frozen_layouts = [label.text_layouts for label in frozen]
    layouts = reply.content.text_layouts
    moves = Moves()
    for label in frozen:
        label.installEventFilter(moves)
    flushes = grew = 0
    # several lines' worth of text, flush by flush (a label frozen meanwhile is new: the
    # ones counted are those frozen before)
    for _ in range(30):
        height = reply.content.height()
        flush(view, reply, words.more(3))
        flushes += 1
        grew += reply.content.height() > height
        assert_no_overlap(reply.labels())
    for label in frozen:
        label.removeEventFilter(moves)

    assert grew >= 2  # the live label grew by lines meanwhile
    # the frozen labels: their text not laid out again, not one move or resize
    assert [label.text_layouts for label in frozen] == frozen_layouts
    assert moves.events == []
    # the live label: its text laid out at most once per flush (its heights are cached)
    assert 1 <= reply.content.text_layouts - layouts <= flushes


def test_the_end_of_the_reply_gives_heights_for_width_back(view: ChatView) -> None:
    words = Words()
    reply = streaming_reply(view, words, 2500)
    assert any(isinstance(label, TextLabel) and label.pinned() for label in reply.labels())
    reply.set_streaming(False)
    settle()
    for label in reply.labels():
        assert isinstance(label, TextLabel) and not label.pinned()
        assert label.hasHeightForWidth()
        assert label.height() == label.heightForWidth(label.width())
    assert_no_overlap(reply.labels())
    # a narrower window: the text wraps again, nothing overlaps
    view.resize(500, 560)
    settle()
    assert_no_overlap(reply.labels())
    assert all(label.height() == label.heightForWidth(label.width()) for label in reply.labels())


def test_a_pinned_label_follows_a_new_width(view: ChatView) -> None:
    words = Words()
    reply = streaming_reply(view, words, 2500)
    first = reply.labels()[0]
    assert isinstance(first, TextLabel) and first.pinned()
    wide = first.height()
    view.resize(480, 560)
    settle()
    assert first.pinned()
    assert first.height() == first.heightForWidth(first.width()) > wide
    assert_no_overlap(reply.labels())


def test_pieces_streamed_between_two_flushes_are_one_layout(view: ChatView) -> None:
    words = Words()
    reply = streaming_reply(view, words, 1200)
    buffer = ReplyBuffer()
    buffer.start()
    buffer.parts = [words.text]
    moves = Moves()
    reply.card.installEventFilter(moves)
    for _ in range(8):  # eight pieces within one frame
        buffer.add_answer(words.more(1)[-8:], 1, 0.0)
    buffer.parts = [words.text]
    assert buffer.paint(reply) is not None
    view.fit_to_text()
    settle()
    assert buffer.paint(reply) is None  # nothing new: no second render
    settle()
    reply.card.removeEventFilter(moves)
    assert reply.data.content == words.text
    assert [t for _, t in moves.events].count(QEvent.Type.LayoutRequest) == 1


@pytest.mark.parametrize(
    ("hz", "frames", "interval"),
    [(60.0, 4, 67), (59.94, 4, 67), (144.0, 10, 69), (30.0, 2, 67), (240.0, 16, 67), (0.0, 4, 67)],
)
def test_flushes_are_whole_frames_at_a_readable_pace(hz: float, frames: int, interval: int) -> None:
    pace = FramePace.for_screen(hz)
    assert (pace.frames, pace.interval_ms) == (frames, interval)
    frame_ms = 1000.0 / pace.refresh_hz
    assert pace.frames * frame_ms >= READ_INTERVAL_MS - 0.01  # never faster than reading
    assert (pace.frames - 1) * frame_ms < READ_INTERVAL_MS  # ... and no slower than needed


def test_the_window_flushes_at_the_screens_pace(qtbot: Any, make_window: Any) -> None:
    window, _ = make_window()
    tab = window.new_tab()
    sampling = {**tab.conversation.sampling, "grammar": ENDLESS_GRAMMAR, "max_tokens": 200}
    tab.host.db.update_conversation_settings(tab.cid, sampling=sampling)
    tab.conversation = tab.host.db.get_conversation(tab.cid)
    tab.settings.set_values(tab.conversation.system_prompt, tab.conversation.sampling)
    send(qtbot, tab, "hello")
    qtbot.waitUntil(lambda: bool(tab.reply_text()), timeout=10000)
    timer = window._flush_timer  # the window's only flush timer
    screen = window.screen()
    assert screen is not None
    expected = FramePace.for_screen(screen.refreshRate()).interval_ms
    assert timer.isActive() and timer.interval() == expected == window.frame_pace().interval_ms
    tab.stop()
    qtbot.waitUntil(lambda: not tab.generating, timeout=10000)
    qtbot.waitUntil(lambda: not timer.isActive(), timeout=2000)
