"""A reasoning model's thinking, shown apart from its answer (issue 10, point 3).

The real path runs a tiny generated model with Qwen3's chat template and a grammar that
makes it write ``<think>…</think>`` before its answer; the engine splits the reply. The
streaming states ("Thinking…" then collapsed) are driven with the session's events.
"""

from __future__ import annotations

import time
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QLabel

from app.engine.chat_template import ReasoningDefaults, ReasoningEffort, ReasoningOptions
from app.engine.reasoning import Channel, ReasoningFormat
from app.session import (
    ConversationId,
    FinishReason,
    RecordedTurn,
    Recorder,
    ReplyMeta,
    TurnId,
    TurnResult,
    reasoning_options,
)
from app.session import events as ev
from app.storage import Database
from app.ui.chat_tab import engine_messages
from app.ui.chat_view import MessageWidget, ReasoningBlock, thought_title
from app.ui.tab_choices import THINKING_TIP, default_thinking_tip
from tests.support.gguf_models import TinySpec, write_tiny_model
from tests.ui.conftest import inspect, send, set_sampling, wait_idle

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


def block_of(widget: MessageWidget | None) -> ReasoningBlock:
    assert widget is not None and widget.reasoning_block is not None
    assert widget.reasoning_block.isVisibleTo(widget)
    return widget.reasoning_block


def shown(block: ReasoningBlock) -> str:
    labels = block.body.findChildren(QLabel, "reasoning-text")
    assert all(label.textFormat() == Qt.TextFormat.PlainText for label in labels)
    return "".join(label.text() for label in labels)


def streamed(cid: int, text: str, n: int, channel: Channel) -> ev.TextStreamed:
    return ev.TextStreamed(ConversationId(cid), TurnId(1), text, channel, n, time.perf_counter())


def test_thought_title() -> None:
    assert thought_title(None) == "Thoughts"
    assert thought_title(400.0) == "Thought for a moment"
    assert thought_title(12_400.0) == "Thought for 12 s"
    assert thought_title(65_000.0) == "Thought for 1 min 5 s"
    assert thought_title(120_000.0) == "Thought for 2 min"


def test_reasoning_options_from_the_conversation_settings() -> None:
    # nothing stored: the model's default (the engine's rule), not a guess of ours
    assert reasoning_options({}) == ReasoningOptions(None, None)
    assert reasoning_options({"enable_thinking": False, "reasoning_effort": "high"}) == (
        ReasoningOptions(False, ReasoningEffort.HIGH)
    )
    assert reasoning_options({"enable_thinking": True}) == ReasoningOptions(True, None)
    assert reasoning_options({"reasoning_effort": "bogus"}).effort is None
    assert reasoning_options({"enable_thinking": "yes"}).enable_thinking is None


def test_thinking_tip_names_the_rule_and_format() -> None:
    on = ReasoningDefaults(ReasoningFormat.THINK_TAGS, True, True, True, False)
    assert default_thinking_tip(on).endswith(
        "Thinking is on by default for this model (its template's <think> format, "
        "llama-server rule)."
    )
    off = ReasoningDefaults(ReasoningFormat.NONE, False, False, False, False)
    assert "Thinking is off by default for this model (llama-server rule: its template " in (
        default_thinking_tip(off)
    )
    assert default_thinking_tip(None) == THINKING_TIP


class PlayedSession:
    """``Session.answer`` played by the test: it records what the session would (through
    the session's own :class:`~app.session.Recorder`) and finishes the reply before the
    test sends ``TurnFinished``, as the session does (``finish`` gives the ``ReplyStored``
    the session sends just before it)."""

    def __init__(self, db: Database) -> None:
        self.recorder = Recorder(db)
        self.calls: list[tuple[Any, ...]] = []
        self.reply_id = 0
        self.cid = 0

    def answer(
        self, cid: int, parent_id: int | None, text: str | None = None, **kwargs: Any
    ) -> Future[RecordedTurn]:
        self.calls.append((cid, parent_id, text, kwargs))
        self.cid = cid
        user = self.recorder.add_user(cid, text or "", parent_id)
        self.reply_id = self.recorder.begin_reply(cid, user.id, "/models/tiny.gguf").id
        future: Future[RecordedTurn] = Future()
        future.set_result(RecordedTurn(TurnId(1), user.id, self.reply_id))
        return future

    def finish(
        self, result: TurnResult, reasoning: str = "", reasoning_ms: float | None = None
    ) -> ev.ReplyStored:
        """What the session's streamed copy adds: ``reasoning`` and its time."""
        meta = ReplyMeta.of(
            result, "/models/tiny.gguf", "llama.cpp", reasoning=reasoning, reasoning_ms=reasoning_ms
        )
        stored = self.recorder.end_reply(self.reply_id, result.text, meta)
        place = self.recorder.db.sibling_position(stored.id) if stored else (1, 1)
        return ev.ReplyStored(ConversationId(self.cid), TurnId(1), stored, meta, *place)


def play(qtbot: Any, window: Any, tab: Any, monkeypatch: Any, text: str) -> PlayedSession:
    played = PlayedSession(window.db)
    monkeypatch.setattr(window.session, "answer", played.answer)
    send(qtbot, tab, text)
    assert tab.generating and played.calls
    qtbot.waitUntil(lambda: tab.reply_id == played.reply_id, timeout=5000)
    return played


def test_streamed_reasoning_then_answer(qtbot: Any, make_window: Any, monkeypatch: Any) -> None:
    window, _ = make_window()
    tab = window.new_tab()
    played = play(qtbot, window, tab, monkeypatch, "think about it")
    cid_, parent, text, kwargs = played.calls[0]
    assert (cid_, parent, text) == (tab.cid, None, "think about it")
    assert kwargs["reasoning"] == reasoning_options(tab.conversation.sampling)
    cid = tab.cid
    tab.on_event(ev.TurnStarted(ConversationId(cid), TurnId(1), 5))
    tab.on_event(streamed(cid, "Let me think: ", 3, Channel.REASONING))
    tab.on_event(streamed(cid, "<b>html</b> stays text", 3, Channel.REASONING))
    tab.flush(True)
    widget = tab.view.last()
    block = block_of(widget)
    assert block.title() == "Thinking…" and block.expanded
    assert shown(block) == "Let me think: <b>html</b> stays text"
    assert widget is not None and not widget.content.isVisible()  # no "…" under it

    assert window.db.get_thread(cid)[-1].status == "partial"

    tab.on_event(streamed(cid, "The answer", 2, Channel.ANSWER))
    tab.flush(True)
    assert block.title().startswith("Thought for") and not block.expanded
    assert widget.data.content == "The answer"

    # a click opens it again
    qtbot.mouseClick(block.toggle, Qt.MouseButton.LeftButton)
    assert block.expanded and block.body.isVisibleTo(block)
    result = TurnResult(
        text="The answer",
        reasoning="Let me think: <b>html</b> stays text",
        reasoning_ms=12_400.0,
        finish_reason=FinishReason.EOG,
        n_tokens=8,
        n_prompt=5,
        n_prompt_processed=5,
    )
    # the session stores the reply (and says so) before TurnFinished goes out
    tab.on_event(played.finish(result))
    tab.on_event(ev.TurnFinished(ConversationId(cid), TurnId(1), result))
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
    played = play(qtbot, window, tab, monkeypatch, "think")
    tab.on_event(streamed(tab.cid, "half a thought", 2, Channel.REASONING))
    tab.flush(True)
    aborted = TurnResult(finish_reason=FinishReason.ABORTED)
    tab.on_event(played.finish(aborted, reasoning="half a thought", reasoning_ms=300.0))
    tab.on_event(ev.TurnFinished(ConversationId(tab.cid), TurnId(1), aborted))
    reply = window.db.get_thread(tab.cid)[-1]
    assert reply.status == "stopped" and reply.content == ""
    assert reply.reasoning == "half a thought" and reply.reasoning_ms is not None
    block = block_of(tab.view.last())
    assert block.title().startswith("Thought for") and not block.expanded
    # an empty answer is not sent back to the model
    assert engine_messages(tab.branch)[-1]["role"] == "user"


def test_real_reasoning_reply(qtbot: Any, make_window: Any, thinking_model: Path) -> None:
    window, rec = make_window(thinking_model)
    tab = window.new_tab()
    # Qwen3's template takes enable_thinking (no effort): only "Thinking" shows, checked
    # as the model's default (nothing stored), and its tooltip says why
    assert not tab.thinking.isHidden() and tab.thinking.isChecked()
    assert tab.effort.isHidden()
    assert "enable_thinking" not in tab.conversation.sampling
    model = window.model
    assert model is not None and model.reasoning is not None
    assert model.reasoning.format is ReasoningFormat.THINK_TAGS
    assert model.reasoning.thinking_by_default
    assert tab.thinking.toolTip() == default_thinking_tip(model.reasoning)
    assert "on by default for this model (its template's <think> format" in tab.thinking.toolTip()
    set_sampling(tab, grammar=THINK_GRAMMAR, max_tokens=200, temperature=0.0)
    send(qtbot, tab, "what do you think?")
    completion = wait_idle(qtbot, tab)
    assert completion.finish_reason == "eog", completion
    assert completion.text == ANSWER and completion.reasoning == THOUGHT
    # nothing stored: the engine got the model's default, and it thought
    assert inspect(qtbot, window, tab).reasoning == ReasoningOptions(None, None)
    assert completion.reasoning_ms is not None
    assert rec.texts(tab.cid) == ANSWER  # the answer signal carries the answer only
    assert rec.reasoning_text(tab.cid) == THOUGHT
    reply = window.db.get_thread(tab.cid)[-1]
    assert reply.content == ANSWER and reply.reasoning == THOUGHT
    assert reply.reasoning_ms == pytest.approx(completion.reasoning_ms)
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
    seen = inspect(qtbot, window, reopened).reasoning
    assert seen == ReasoningOptions(enable_thinking=False, effort=None)  # no effort stored


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
