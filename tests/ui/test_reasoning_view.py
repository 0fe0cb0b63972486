"""A reasoning model's thinking, shown apart from its answer (issue 10, point 3).

The real path runs a tiny generated model with Qwen3's chat template and a grammar that
makes it write ``<think>…</think>`` before its answer; the engine splits the reply. The
streaming states ("Thinking…" then collapsed) are driven with the worker's signals.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import QObject, Qt, Slot
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QLabel

from app.engine import Completion, Finished, TokenText
from app.engine.chat_template import ReasoningEffort, ReasoningOptions
from app.engine.reasoning import Channel
from app.ui.chat_tab import engine_messages
from app.ui.chat_view import MessageWidget, ReasoningBlock, thought_title
from app.ui.worker import EngineWorker, reasoning_options
from tests.support.gguf_models import TinySpec, write_tiny_model
from tests.ui.conftest import send, wait_idle

TEMPLATES = Path(__file__).resolve().parents[1] / "data" / "chat-templates"
THOUGHT = "hmm <b>html</b> yes"
ANSWER = "hello world"
# The tiny model spells anything with its byte tokens; this reply ends after the answer.
THINK_GRAMMAR = f'root ::= "<think>\\n{THOUGHT}\\n</think>\\n\\n{ANSWER}"'


@pytest.fixture(scope="module")
def thinking_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    template = (TEMPLATES / "Qwen-Qwen3-0.6B.jinja").read_text(encoding="utf-8")
    spec = TinySpec(chat_template=template, name="tiny-thinking")
    return write_tiny_model(tmp_path_factory.mktemp("models") / "thinking.gguf", spec)


def set_sampling(tab: Any, **values: Any) -> None:
    sampling = {**tab.conversation.sampling, **values}
    tab.db.update_conversation_settings(tab.cid, sampling=sampling)
    tab.conversation = tab.db.get_conversation(tab.cid)
    tab.settings.set_values(tab.conversation.system_prompt, tab.conversation.sampling)


def block_of(widget: MessageWidget | None) -> ReasoningBlock:
    assert widget is not None and widget.reasoning_block is not None
    assert widget.reasoning_block.isVisibleTo(widget)
    return widget.reasoning_block


def shown(block: ReasoningBlock) -> str:
    labels = block.body.findChildren(QLabel, "reasoning-text")
    assert all(label.textFormat() == Qt.TextFormat.PlainText for label in labels)
    return "".join(label.text() for label in labels)


class ReasoningRecorder(QObject):
    def __init__(self) -> None:
        super().__init__()
        self.pieces: list[tuple[int, str]] = []

    @Slot(int, str, int, float)
    def on_reasoning(self, tab: int, text: str, _n: int, _t: float) -> None:
        self.pieces.append((tab, text))

    def text(self, tab: int) -> str:
        return "".join(t for k, t in self.pieces if k == tab)


def test_thought_title() -> None:
    assert thought_title(None) == "Thoughts"
    assert thought_title(400.0) == "Thought for a moment"
    assert thought_title(12_400.0) == "Thought for 12 s"
    assert thought_title(65_000.0) == "Thought for 1 min 5 s"
    assert thought_title(120_000.0) == "Thought for 2 min"


def test_reasoning_options_from_the_conversation_settings() -> None:
    assert reasoning_options({}) == ReasoningOptions(True, ReasoningEffort.MEDIUM)
    assert reasoning_options({"enable_thinking": False, "reasoning_effort": "high"}) == (
        ReasoningOptions(False, ReasoningEffort.HIGH)
    )
    assert reasoning_options({"reasoning_effort": "bogus"}).effort is ReasoningEffort.MEDIUM


def test_worker_relays_each_channel_in_order(qtbot: Any) -> None:
    worker = EngineWorker(None)
    got: list[tuple[str, str, int]] = []
    worker.reasoning.connect(lambda tab, text, n, _t: got.append(("reasoning", text, n)))
    worker.tokens.connect(lambda tab, text, n, _t: got.append(("answer", text, n)))
    finished: list[dict[str, Any]] = []
    worker.finished.connect(lambda tab, c: finished.append(c))

    class FakeEngine:
        def __init__(self, events: list[Any]) -> None:
            self.events = events

        def step(self) -> list[Any]:
            events, self.events = self.events, []
            return events

        def is_busy(self, key: int) -> bool:
            return False

    worker._tabs[7] = 3
    worker._keys[3] = 7
    completion = Completion(text="B", tokens=[1, 2, 3], reasoning="a1a2", reasoning_ms=1500.0)
    engine = FakeEngine(
        [
            TokenText(7, "a1", 1, Channel.REASONING),
            TokenText(7, "a2", 2, Channel.REASONING),
            TokenText(7, "B", 2, Channel.ANSWER),  # the same token ended the thinking
            Finished(7, completion),
        ]
    )
    worker._step(engine)  # type: ignore[arg-type]
    assert got == [("reasoning", "a1a2", 2), ("answer", "B", 0)]
    assert finished[0]["reasoning"] == "a1a2" and finished[0]["reasoning_ms"] == 1500.0
    assert finished[0]["text"] == "B"


def test_streamed_reasoning_then_answer(qtbot: Any, make_window: Any, monkeypatch: Any) -> None:
    window, _ = make_window()
    tab = window.new_tab()
    submitted: list[tuple[Any, ...]] = []

    def fake_submit(*args: Any) -> int:
        submitted.append(args)
        return 1

    monkeypatch.setattr(window.worker, "submit", fake_submit)
    send(qtbot, tab, "think about it")
    assert tab.generating and submitted
    cid = tab.cid
    window._on_started(cid, 5)
    window._on_reasoning(cid, "Let me think: ", 3, time.perf_counter())
    window._on_reasoning(cid, "<b>html</b> stays text", 3, time.perf_counter())
    tab.flush(True)
    widget = tab.view.last()
    block = block_of(widget)
    assert block.title() == "Thinking…" and block.expanded
    assert shown(block) == "Let me think: <b>html</b> stays text"
    assert widget is not None and not widget.content.isVisible()  # no "…" under it

    # saved while it streams, both parts apart
    tab._last_save = 0.0
    tab.flush(True)
    assert window.reply_saver.flush()
    partial = window.db.get_thread(cid)[-1]
    assert partial.status == "partial" and partial.content == ""
    assert partial.reasoning == "Let me think: <b>html</b> stays text"

    window._on_tokens(cid, "The answer", 2, time.perf_counter())
    tab.flush(True)
    assert block.title().startswith("Thought for") and not block.expanded
    assert widget.data.content == "The answer"
    tab._last_save = 0.0
    tab.flush(True)
    assert window.reply_saver.flush()
    partial = window.db.get_thread(cid)[-1]
    assert partial.content == "The answer" and partial.reasoning_ms is not None

    # a click opens it again
    qtbot.mouseClick(block.toggle, Qt.MouseButton.LeftButton)
    assert block.expanded and block.body.isVisibleTo(block)
    window._on_finished(
        cid,
        {
            "text": "The answer",
            "reasoning": "Let me think: <b>html</b> stays text",
            "reasoning_ms": 12_400.0,
            "finish_reason": "eog",
            "n_tokens": 8,
            "n_prompt": 5,
            "n_prompt_processed": 5,
        },
    )
    assert not tab.generating
    assert block.title() == "Thought for 12 s"
    reply = window.db.get_thread(cid)[-1]
    assert reply.status == "complete" and reply.content == "The answer"
    assert reply.reasoning == "Let me think: <b>html</b> stays text"
    assert reply.reasoning_ms == 12_400.0
    qtbot.mouseClick(widget.copy_button, Qt.MouseButton.LeftButton)
    clipboard = QGuiApplication.clipboard()
    assert clipboard is not None and clipboard.text() == "The answer"
    # the next turn's prompt gets the reasoning as reasoning_content
    history = engine_messages(tab.branch)
    assert history[-1] == {
        "role": "assistant",
        "content": "The answer",
        "reasoning_content": "Let me think: <b>html</b> stays text",
    }


def test_stopped_while_thinking_keeps_the_thoughts(
    qtbot: Any, make_window: Any, monkeypatch: Any
) -> None:
    window, _ = make_window()
    tab = window.new_tab()
    monkeypatch.setattr(window.worker, "submit", lambda *a: 1)
    send(qtbot, tab, "think")
    window._on_reasoning(tab.cid, "half a thought", 2, time.perf_counter())
    tab.flush(True)
    window._on_finished(tab.cid, {"text": "", "reasoning": "", "finish_reason": "aborted"})
    reply = window.db.get_thread(tab.cid)[-1]
    assert reply.status == "stopped" and reply.content == ""
    assert reply.reasoning == "half a thought" and reply.reasoning_ms is not None
    block = block_of(tab.view.last())
    assert block.title().startswith("Thought for") and not block.expanded
    # an empty answer is not sent back to the model
    assert engine_messages(tab.branch)[-1]["role"] == "user"


def test_real_reasoning_reply(qtbot: Any, make_window: Any, thinking_model: Path) -> None:
    window, rec = make_window(thinking_model)
    thoughts = ReasoningRecorder()
    window.worker.reasoning.connect(thoughts.on_reasoning)
    tab = window.new_tab()
    # Qwen3's template takes enable_thinking (no effort): only "Thinking" shows, checked
    assert not tab.thinking.isHidden() and tab.thinking.isChecked()
    assert tab.effort.isHidden()
    set_sampling(tab, grammar=THINK_GRAMMAR, max_tokens=200, temperature=0.0)
    send(qtbot, tab, "what do you think?")
    completion = wait_idle(qtbot, tab)
    assert completion["finish_reason"] == "eog", completion
    assert completion["text"] == ANSWER and completion["reasoning"] == THOUGHT
    assert completion["reasoning_ms"] is not None
    assert rec.texts(tab.cid) == ANSWER  # the answer signal carries the answer only
    assert thoughts.text(tab.cid) == THOUGHT
    reply = window.db.get_thread(tab.cid)[-1]
    assert reply.content == ANSWER and reply.reasoning == THOUGHT
    assert reply.reasoning_ms == pytest.approx(completion["reasoning_ms"])
    widget = tab.view.last()
    block = block_of(widget)
    assert block.title().startswith("Thought for") and not block.expanded
    qtbot.mouseClick(block.toggle, Qt.MouseButton.LeftButton)
    assert shown(block) == THOUGHT  # the markup shows literally
    assert widget is not None
    qtbot.mouseClick(widget.copy_button, Qt.MouseButton.LeftButton)
    clipboard = QGuiApplication.clipboard()
    assert clipboard is not None and clipboard.text() == ANSWER

    # reopened from storage: the block is there, collapsed; the question has none
    cid = tab.cid
    window.close_current_tab()
    window.open_conversation(cid)
    reopened = window.tab_for(cid)
    assert reopened is not None and reopened is not tab
    widgets = reopened.view.messages()
    assert widgets[0].reasoning_block is None
    block = block_of(widgets[-1])
    assert block.title().startswith("Thought for") and not block.expanded
    assert block.text() == THOUGHT

    # "Thinking" off is kept with the conversation and reaches the engine
    reopened.thinking.click()
    assert reopened.conversation.sampling["enable_thinking"] is False
    set_sampling(reopened, grammar=f'root ::= "{ANSWER}"', max_tokens=20)
    send(qtbot, reopened, "and now?")
    wait_idle(qtbot, reopened)
    key = window.worker._keys[cid]
    seen: list[Any] = []
    window.worker.call(lambda e: e._seq(key).reasoning, seen.append)
    qtbot.waitUntil(lambda: bool(seen), timeout=10000)
    assert seen[0] == ReasoningOptions(enable_thinking=False, effort=ReasoningEffort.MEDIUM)


def test_no_reasoning_no_block(qtbot: Any, make_window: Any) -> None:
    window, _ = make_window()
    tab = window.new_tab()
    # the tiny ChatML model's template uses neither choice
    assert tab.thinking.isHidden() and tab.effort.isHidden()
    set_sampling(tab, max_tokens=6, temperature=0.0)
    send(qtbot, tab, "hello")
    wait_idle(qtbot, tab)
    widget = tab.view.last()
    assert widget is not None and widget.reasoning_block is None
    assert window.db.get_thread(tab.cid)[-1].reasoning == ""
