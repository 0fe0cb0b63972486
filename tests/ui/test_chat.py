"""The chat window end to end: real engine on its worker thread, tiny generated models."""

from __future__ import annotations

import time
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from PySide6.QtCore import Qt

from app.errors import LlamaDeskError
from app.session import (
    ContextFullPolicy,
    ConversationId,
    FinishReason,
    RecordedTurn,
    TurnId,
    TurnResult,
)
from app.session import events as ev
from app.storage import Database
from tests.ui.conftest import (
    ENDLESS_GRAMMAR,
    WORDS_GRAMMAR,
    close_window,
    held_tokens,
    inspect,
    send,
    set_sampling,
    wait_idle,
)


def endless(tab: Any, max_tokens: int = 4000) -> None:
    set_sampling(tab, grammar=ENDLESS_GRAMMAR, max_tokens=max_tokens, temperature=0.8, seed=3)


def words(tab: Any, max_tokens: int) -> None:
    """Readable replies (words, may end): their text renders back to the tokens sampled."""
    set_sampling(tab, grammar=WORDS_GRAMMAR, max_tokens=max_tokens, temperature=0.8, seed=7)


def assert_reused(c: TurnResult, earlier: TurnResult) -> None:
    """The turn processed only the new message: the earlier turn's prompt and the
    reply's sampled tokens came from the cache (the engine keeps the sampled tokens).
    Needs a readable earlier reply (``words``): the tiny model's unconstrained output is
    invalid UTF-8, which the template cannot render back to the same tokens."""
    assert c.n_prompt - c.n_prompt_processed >= earlier.n_prompt + earlier.n_tokens - 1
    assert c.n_prompt_processed < c.n_prompt - earlier.n_prompt


def assert_prompt_reused(c: TurnResult, earlier: TurnResult) -> None:
    """Weaker: at least the earlier turn's prompt came from the cache. The tiny model's
    SentencePiece vocabulary puts a space before every text run, so a sampled reply split
    differently from the tokenizer cannot be kept (the engine keeps it only when it spells
    exactly the rendered text); tests/engine covers full reuse on the demo model's BPE."""
    assert c.n_prompt - c.n_prompt_processed >= earlier.n_prompt - 1
    assert c.n_prompt_processed < c.n_prompt


def test_send_and_stream(qtbot: Any, make_window: Any) -> None:
    window, rec = make_window()
    tab = window.new_tab()
    assert tab is not None and window.current_tab() is tab
    set_sampling(tab, max_tokens=48, temperature=0.7, seed=1)
    send(qtbot, tab, "hello world")
    assert tab.generating and tab.stop_button.isVisible()  # at once, before any reply
    # the session records both messages, then the tab shows them
    qtbot.waitUntil(lambda: len(tab.view.messages()) == 2, timeout=10000)
    thread = window.db.get_thread(tab.cid)
    assert [m.role for m in thread] == ["user", "assistant"]
    assert [w.data.id for w in tab.view.messages()] == [m.id for m in thread]
    assert thread[0].content == "hello world"
    assert thread[1].status in ("partial", "complete")
    completion = wait_idle(qtbot, tab)
    assert completion.finish_reason in ("eog", "length")
    assert completion.n_tokens > 0
    assert rec.texts(tab.cid) == completion.text  # streamed pieces add up to the reply
    reply = window.db.get_thread(tab.cid)[-1]
    assert reply.status == "complete" and reply.content == completion.text
    assert reply.token_count == completion.n_tokens and reply.tokens_per_second
    widget = tab.view.last()
    assert widget is not None and widget.data.id == reply.id
    assert "tokens" in widget.figures.text()
    assert tab.composer.toPlainText() == ""
    assert tab.state_label.text().startswith("idle")
    # the stored time to first token is the session's, from Send (the answer call in the
    # same click) to the first token sampled: within what the tab saw (Send to shown)
    shown_ms = tab.reply.first_token_ms
    assert shown_ms is not None
    assert 0 < reply.meta["ttft_ms"] <= shown_ms + 0.1
    assert reply.meta["engine"] == "llama.cpp" and reply.model_path
    assert "/ 2,048 tokens" in tab.meter_label.text()
    assert window.message_bar.text() == ""


def test_shift_enter_is_a_new_line_and_escape_cancels_nothing(qtbot: Any, make_window: Any) -> None:
    window, _ = make_window()
    tab = window.new_tab()
    tab.composer.setPlainText("line one")
    tab.composer.moveCursor(tab.composer.textCursor().MoveOperation.End)
    qtbot.keyClick(tab.composer, Qt.Key.Key_Return, Qt.KeyboardModifier.ShiftModifier)
    assert tab.composer.toPlainText() == "line one\n"
    assert not tab.generating
    qtbot.keyClick(tab.composer, Qt.Key.Key_Escape)
    assert not tab.generating and window.db.get_thread(tab.cid) == []


def test_stop_mid_reply(qtbot: Any, make_window: Any) -> None:
    window, rec = make_window()
    tab = window.new_tab()
    endless(tab)
    send(qtbot, tab, "hello")
    qtbot.waitUntil(lambda: len(rec.texts(tab.cid)) > 0, timeout=10000)
    qtbot.mouseClick(tab.stop_button, Qt.MouseButton.LeftButton)
    completion = wait_idle(qtbot, tab, 10000)
    assert completion.finish_reason == "aborted"
    assert 0 < completion.n_tokens < 4000
    reply = window.db.get_thread(tab.cid)[-1]
    assert reply.status == "stopped" and reply.content == completion.text != ""
    assert "stopped" in tab.view.last().figures.text()
    # the tab works again afterwards
    set_sampling(tab, grammar=None, max_tokens=8)
    send(qtbot, tab, "again")
    assert wait_idle(qtbot, tab).finish_reason in ("eog", "length")


def test_stop_mid_prompt_with_escape(qtbot: Any, make_window: Any, slow_model: Path) -> None:
    window, rec = make_window(
        slow_model, context={"n_ctx": 4096, "n_batch": 32, "n_ubatch": 32, "n_seq_max": 2}
    )
    tab = window.new_tab()
    set_sampling(tab, max_tokens=16)
    send(qtbot, tab, "hello world chat tab " * 90)
    qtbot.waitUntil(lambda: any(k == tab.cid for k, _, _ in rec.progress), timeout=10000)
    assert "processing prompt" in tab.state_label.text()
    tab.composer.setFocus()
    qtbot.keyClick(tab.composer, Qt.Key.Key_Escape)
    completion = wait_idle(qtbot, tab, 10000)
    assert completion.finish_reason == "aborted"
    assert completion.n_tokens == 0
    done = [d for k, d, _ in rec.progress if k == tab.cid]
    total = next(t for k, _, t in rec.progress if k == tab.cid)
    assert max(done) < total  # it really stopped half-way
    assert window.db.get_thread(tab.cid)[-1].status == "stopped"


def test_two_tabs_generate_while_switching(qtbot: Any, make_window: Any) -> None:
    window, rec = make_window()
    first = window.new_tab()
    endless(first, 600)
    send(qtbot, first, "hello from the first tab")
    second = window.new_tab()
    endless(second, 600)
    send(qtbot, second, "hello from the second tab")
    assert first.generating and second.generating
    seen_both = False
    for _ in range(6):
        window.next_tab()
        qtbot.wait(40)
        if first.generating and second.generating:
            seen_both = True
    assert seen_both, "both tabs should generate at the same time"
    # the tab not shown keeps generating and buffering
    window.tab_widget.setCurrentWidget(first)
    before = len(rec.texts(second.cid))
    # (on a fast machine it may already have finished all its 600 tokens while hidden)
    qtbot.waitUntil(
        lambda: len(rec.texts(second.cid)) > before or not second.generating, timeout=5000
    )
    c1 = wait_idle(qtbot, first, 30000)
    c2 = wait_idle(qtbot, second, 30000)
    assert c1.n_tokens == 600 and c2.n_tokens == 600
    # the hidden tab's text was painted when it was shown
    window.tab_widget.setCurrentWidget(second)
    assert second.view.last().data.content == c2.text
    # switching never re-processed anything: each prompt was processed once, and each
    # sequence still holds its whole conversation
    for tab, c in ((first, c1), (second, c2)):
        assert c.n_prompt_processed == c.n_prompt
        held = held_tokens(qtbot, window, tab)
        assert len(held) >= c.n_prompt + c.n_tokens - 1


def test_more_tabs_than_resident_slots_evict_to_disk(qtbot: Any, make_window: Any) -> None:
    window, _ = make_window(context={"n_seq_max": 2})
    tabs, firsts = [], []
    for i in range(3):
        tab = window.new_tab()
        words(tab, 6)
        send(qtbot, tab, f"tab number {i}")
        firsts.append(wait_idle(qtbot, tab))
        tabs.append(tab)
    # three conversations, two slots: the least recently used was saved and evicted
    qtbot.waitUntil(lambda: tabs[0].info.on_disk is True, timeout=5000)
    assert "saved to disk" in tabs[0].state_text()
    assert any(window.store.directory.glob(f"{tabs[0].cid}-*.kvstate"))
    # it comes back from there: the follow-up processes only the new message
    window.tab_widget.setCurrentWidget(tabs[0])
    send(qtbot, tabs[0], "back again")
    assert_prompt_reused(wait_idle(qtbot, tabs[0]), firsts[0])


def test_fork_shares_the_cache(qtbot: Any, make_window: Any) -> None:
    window, _ = make_window()
    tab = window.new_tab()
    set_sampling(tab, max_tokens=12, temperature=0.0)
    send(qtbot, tab, "first question")
    wait_idle(qtbot, tab)
    send(qtbot, tab, "second question")
    wait_idle(qtbot, tab)
    first_reply = tab.branch[1]
    assert first_reply.role == "assistant"
    held = len(held_tokens(qtbot, window, tab))
    widget = tab.view.widget_for(first_reply.id)
    qtbot.mouseClick(widget.fork_button, Qt.MouseButton.LeftButton)
    fork = window.current_tab()
    assert fork is not tab and fork.cid != tab.cid
    assert [m.content for m in fork.branch] == [m.content for m in tab.branch[:2]]
    qtbot.waitUntil(lambda: fork.info.forked is True, timeout=5000)
    fork_tokens = held_tokens(qtbot, window, fork)
    src_tokens = held_tokens(qtbot, window, tab)
    assert 0 < len(fork_tokens) < held
    assert fork_tokens == src_tokens[: len(fork_tokens)]  # a copy of the prefix, no re-processing
    send(qtbot, fork, "a different second question")
    c = wait_idle(qtbot, fork)
    assert c.n_prompt_processed < c.n_prompt - len(fork_tokens) + 40
    assert len(window.db.get_thread(tab.cid)) == 4  # the source is untouched


def test_edit_and_regenerate(qtbot: Any, make_window: Any) -> None:
    window, _ = make_window()
    tab = window.new_tab()
    set_sampling(tab, max_tokens=10, temperature=0.9, seed=-1)
    send(qtbot, tab, "tell me something")
    wait_idle(qtbot, tab)
    reply = tab.branch[-1]
    # regenerate: a sibling reply, reusing the cached prompt
    qtbot.mouseClick(tab.view.widget_for(reply.id).regen_button, Qt.MouseButton.LeftButton)
    c = wait_idle(qtbot, tab)
    assert c.n_prompt_processed <= 2
    new_reply = tab.branch[-1]
    assert new_reply.id != reply.id and new_reply.parent_id == reply.parent_id
    assert window.db.sibling_position(new_reply.id) == (2, 2)
    assert tab.view.last().sibling_label.text() == "2/2"
    # browse back to the first version
    qtbot.mouseClick(tab.view.last().prev_button, Qt.MouseButton.LeftButton)
    assert tab.branch[-1].id == reply.id
    # edit the user message: a sibling user message and a new reply
    user = tab.branch[0]
    qtbot.mouseClick(tab.view.widget_for(user.id).edit_button, Qt.MouseButton.LeftButton)
    assert tab.composer.toPlainText() == "tell me something" and tab.edit_banner.isVisible()
    tab.composer.setPlainText("tell me something else")
    qtbot.keyClick(tab.composer, Qt.Key.Key_Return)
    wait_idle(qtbot, tab)
    assert [m.role for m in tab.branch] == ["user", "assistant"]
    assert tab.branch[0].content == "tell me something else"
    assert window.db.sibling_position(tab.branch[0].id) == (2, 2)
    assert not tab.edit_banner.isVisible()


def test_settings_rebuild_keeps_tabs(qtbot: Any, make_window: Any) -> None:
    from app.engine import ContextSettings

    window, _ = make_window()
    tabs, firsts = [], []
    for text in ("one", "two"):
        tab = window.new_tab()
        words(tab, 8)
        send(qtbot, tab, f"conversation {text}")
        firsts.append(wait_idle(qtbot, tab))
        tabs.append(tab)
    before = {t.cid: held_tokens(qtbot, window, t) for t in tabs}
    window.open_settings()
    panel = window.settings_panel()
    assert panel is not None and panel.isVisible()
    new = ContextSettings.from_dict(
        {**window.model.settings.to_dict(), "n_ctx": 1536}
    )  # within the tiny model's 2,048
    panel.applyRequested.emit(new)
    qtbot.waitUntil(lambda: window.model.settings.n_ctx == 1536, timeout=15000)
    assert window.model.settings.n_ctx == 1536
    assert window.app_settings.context["n_ctx"] == 1536
    after = {t.cid: held_tokens(qtbot, window, t) for t in tabs}
    assert after == before  # every tab kept its cache through the rebuild
    qtbot.waitUntil(lambda: "/ 1,536 tokens" in tabs[0].meter_label.text(), timeout=5000)
    send(qtbot, tabs[0], "still here?")
    assert_reused(wait_idle(qtbot, tabs[0]), firsts[0])
    # a change of layout (KV type) re-processes instead, silently
    new2 = ContextSettings.from_dict({**window.model.settings.to_dict(), "type_k": "f32"})
    window.settings_panel().applyRequested.emit(new2)
    qtbot.waitUntil(lambda: window.model.settings.type_k == "f32", timeout=15000)
    send(qtbot, tabs[1], "and now?")
    c2 = wait_idle(qtbot, tabs[1])
    assert c2.finish_reason in ("eog", "length") and window.message_bar.text() == ""


def test_close_during_generation_and_reopen(qtbot: Any, make_window: Any, tiny_model: Path) -> None:
    window, _ = make_window()
    quiet = window.new_tab()
    words(quiet, 10)
    send(qtbot, quiet, "remember this conversation")
    first = wait_idle(qtbot, quiet)
    busy = window.new_tab()
    endless(busy, 100000)
    send(qtbot, busy, "keep talking")
    qtbot.waitUntil(lambda: busy.reply_text() != "", timeout=10000)
    ids = [quiet.cid, busy.cid]
    started = time.monotonic()
    window.close()
    qtbot.waitUntil(window.is_shut_down, timeout=3000)
    assert time.monotonic() - started < 2.0
    db = Database.open()
    try:
        reply = db.get_thread(busy.cid)[-1]
        assert reply.status == "stopped" and reply.content
        tabs, active = db.load_tabs()
        assert [t.conversation_id for t in tabs] == ids and active == busy.cid
    finally:
        db.close()
    for cid in ids:
        assert any(window.store.directory.glob(f"{cid}-*.kvstate"))

    window2, _ = make_window(write=False)
    assert [t.cid for t in window2.tabs()] == ids
    reopened = window2.tab_for(quiet.cid)
    qtbot.waitUntil(lambda: reopened.info.restored is True, timeout=5000)
    assert "restored" in reopened.state_text()
    assert [m.content for m in reopened.branch] == [first.text] or reopened.branch
    send(qtbot, reopened, "what did I say?")
    c = wait_idle(qtbot, reopened)
    # answered without re-processing the conversation's prompt
    assert_prompt_reused(c, first)
    close_window(qtbot, window2)


def test_next_turn_processes_only_the_new_message(qtbot: Any, make_window: Any) -> None:
    window, _ = make_window()
    tab = window.new_tab()
    words(tab, 12)
    send(qtbot, tab, "question number 0")
    first = wait_idle(qtbot, tab)
    shown = tab.view.messages()
    send(qtbot, tab, "question number 1")
    assert_prompt_reused(wait_idle(qtbot, tab), first)
    # the new turn added two widgets; the ones already shown were kept
    assert tab.view.messages()[:2] == shown and len(tab.view.messages()) == 4
    assert [w.data.id for w in tab.view.messages()] == [m.id for m in tab.branch]


def test_when_full_policy_is_per_tab(qtbot: Any, make_window: Any) -> None:
    window, _ = make_window()
    first, second = window.new_tab(), window.new_tab()
    assert first.policy.currentData() == second.policy.currentData() == "shift"

    def policies() -> dict[int, Any]:
        return {t.cid: inspect(qtbot, window, t).policy for t in (first, second)}

    qtbot.waitUntil(lambda: all(inspect(qtbot, window, t).n_ctx > 0 for t in (first, second)))
    assert policies() == {first.cid: None, second.cid: None}  # the default
    first.policy.setCurrentIndex(first.policy.findData("stop"))
    first.policy.activated.emit(first.policy.currentIndex())
    assert policies() == {first.cid: ContextFullPolicy.STOP, second.cid: None}
    assert second.policy.currentData() == "shift"
    assert window.app_settings.context_full_policy == "shift"  # still the default for new tabs
    assert inspect(qtbot, window, first).default_policy is ContextFullPolicy.SHIFT
    # kept with the conversation: a reopened tab gets its policy back
    assert window.db.get_conversation(first.cid).sampling["context_full_policy"] == "stop"
    send(qtbot, first, "hello")  # the sampling dict with the policy is accepted
    assert wait_idle(qtbot, first).finish_reason in ("eog", "length")
    close_window(qtbot, window)
    window2, _ = make_window(write=False)
    reopened = window2.tab_for(first.cid)
    assert reopened.policy.currentData() == "stop"
    qtbot.waitUntil(lambda: inspect(qtbot, window2, reopened).n_ctx > 0)
    assert inspect(qtbot, window2, reopened).policy is ContextFullPolicy.STOP


def test_refused_cache_is_information(qtbot: Any, make_window: Any) -> None:
    window, _ = make_window()
    tab = window.new_tab()
    words(tab, 8)
    send(qtbot, tab, "remember me")
    wait_idle(qtbot, tab)
    close_window(qtbot, window)
    # another KV cache type: the saved cache does not fit, its text is read again
    window2, _ = make_window(context={"type_k": "f32"})
    reopened = window2.tab_for(tab.cid)
    qtbot.waitUntil(lambda: "re-processed" in reopened.state_label.text(), timeout=5000)
    assert reopened.state_label.text().startswith("idle · cache re-processed: ")
    assert reopened.state_label.toolTip()
    assert window2.message_bar.text() == ""  # not an error
    send(qtbot, reopened, "still there?")
    c = wait_idle(qtbot, reopened)
    assert c.finish_reason in ("eog", "length") and c.n_prompt_processed == c.n_prompt
    assert "re-processed" in reopened.state_label.text()  # says what just happened
    send(qtbot, reopened, "and now?")
    wait_idle(qtbot, reopened)
    assert reopened.state_label.text() == "idle"


def test_a_refused_turn_writes_nothing_and_gives_the_text_back(
    qtbot: Any, make_window: Any, monkeypatch: Any
) -> None:
    """The session refuses a turn before recording it (here: as a session without a
    database does): its error is said once, the tab is idle, the text is in the composer
    again and nothing was stored."""
    window, _ = make_window()
    tab = window.new_tab()
    session = window.session
    refusal = "This session has no database: it records no messages."

    def refuse(cid: int, parent_id: int | None, text: str | None = None, **_: Any) -> Any:
        future: Future[RecordedTurn] = Future()
        future.set_exception(LlamaDeskError(refusal))
        # what the session then sends the conversation (Outbox.fail_turn)
        window.worker.stream(cid).received.emit(ev.TurnFailed(ConversationId(cid), refusal))
        result = TurnResult(finish_reason=FinishReason.ERROR, error=refusal)
        window.worker.stream(cid).received.emit(
            ev.TurnFinished(ConversationId(cid), TurnId(1), result)
        )
        return future

    monkeypatch.setattr(session, "answer", refuse)
    send(qtbot, tab, "lost words?")
    qtbot.waitUntil(lambda: not tab.generating, timeout=5000)
    assert tab.composer.toPlainText() == "lost words?"
    assert tab.notice.isVisible() and refusal in tab.notice.text()
    assert window.db.get_thread(tab.cid) == []
    assert tab.view.messages() == [] and tab.reply_id is None
