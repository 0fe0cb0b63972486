"""The window's polish: focus, notices in their tab, errors that are not replies, quitting
while a reply is written, narrow windows, the tab menu, help, first prompts, Enter to send.

Real window, real engine on its thread, tiny generated model; nothing mocked.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import QPoint, Qt
from PySide6.QtWidgets import QApplication, QMessageBox, QPushButton

from app import paths
from tests.ui.conftest import ENDLESS_GRAMMAR, send, set_sampling, wait_idle


def activate(qtbot: Any, window: Any) -> None:
    window.activateWindow()
    qtbot.waitUntil(lambda: QApplication.activeWindow() is window, timeout=5000)


def test_focus_goes_to_the_composer_of_the_chat_that_becomes_current(
    qtbot: Any, make_window: Any
) -> None:
    window, _ = make_window()
    activate(qtbot, window)
    first = window.new_tab()
    second = window.new_tab()
    assert first is not None and second is not None
    qtbot.waitUntil(second.composer.hasFocus, timeout=3000)
    qtbot.keyClick(window, Qt.Key.Key_Tab, Qt.KeyboardModifier.ControlModifier)
    assert window.current_tab() is first
    qtbot.waitUntil(first.composer.hasFocus, timeout=3000)
    qtbot.keyClicks(QApplication.focusWidget(), "typed")
    assert first.composer.toPlainText() == "typed"  # no keystroke lost
    # opening a chat (as the sidebar does) focuses its composer too
    send(qtbot, second, "hello")
    wait_idle(qtbot, second)
    window.tab_widget.setCurrentWidget(first)
    window.open_conversation(second.cid)
    qtbot.waitUntil(second.composer.hasFocus, timeout=3000)


def test_a_fork_says_so_in_its_tab_and_takes_the_focus(qtbot: Any, make_window: Any) -> None:
    window, _ = make_window()
    activate(qtbot, window)
    tab = window.new_tab()
    assert tab is not None
    set_sampling(tab, max_tokens=4)
    send(qtbot, tab, "A first message long enough to fill the whole tab title and more")
    wait_idle(qtbot, tab)
    window.fork_from(tab, tab.leaf_id())
    fork = window.current_tab()
    assert fork is not None and fork is not tab
    text = window.tab_widget.tabText(window.tab_widget.indexOf(fork))
    assert text.endswith("(fork)") and "…" in text
    qtbot.waitUntil(fork.composer.hasFocus, timeout=3000)


def test_an_error_is_a_notice_in_its_tab_not_an_assistant_message(
    qtbot: Any, make_window: Any, monkeypatch: Any
) -> None:
    window, _ = make_window()
    tab = window.new_tab()
    other = window.new_tab()
    assert tab is not None and other is not None
    window.tab_widget.setCurrentWidget(tab)
    # more than the sequence's whole context (2048 cells for 4 tabs: 512 each)
    send(qtbot, tab, " ".join(f"word{i}" for i in range(900)))
    result = wait_idle(qtbot, tab)
    assert result.error
    thread = window.db.get_thread(tab.cid)
    assert [m.role for m in thread] == ["user"]  # no failed assistant message stored
    assert [w.data.role for w in tab.view.messages()] == ["user"]
    assert tab.notice.text() == result.error and tab.notice.error  # said once, in its tab
    assert window.message_bar.text() == "" and other.notice.text() == ""
    assert tab.notice.action_button.text() == "Try again"
    # "Try again" asks the session for another reply to the stored question, no new text
    asked: list[tuple[Any, ...]] = []
    answer = window.session.answer

    def spy(cid: int, parent_id: int | None, text: str | None = None, **kw: Any) -> Any:
        asked.append((cid, parent_id, text))
        return answer(cid, parent_id, text, **kw)

    monkeypatch.setattr(window.session, "answer", spy)
    tab.notice.action_button.click()
    assert asked == [(tab.cid, thread[0].id, None)]
    wait_idle(qtbot, tab)
    assert [m.role for m in window.db.get_thread(tab.cid)] == ["user"]  # failed again: dropped


def test_a_long_message_shows_its_token_count_before_it_is_sent(
    qtbot: Any, make_window: Any
) -> None:
    window, _ = make_window()
    tab = window.new_tab()
    assert tab is not None
    tab.composer.setPlainText("short")
    assert tab.token_hint.isHidden()
    tab.composer.setPlainText(" ".join(f"word{i}" for i in range(900)))
    qtbot.waitUntil(tab.token_hint.isVisible, timeout=5000)
    text = tab.token_hint.text()
    assert "tokens" in text and "more than the context can take" in text
    assert tab.token_hint.property("error") is True
    tab.composer.setPlainText("short again")
    assert tab.token_hint.isHidden()


def test_quitting_while_a_reply_is_written_asks_first(qtbot: Any, make_window: Any) -> None:
    window, _ = make_window()
    tab = window.new_tab()
    assert tab is not None
    set_sampling(tab, grammar=ENDLESS_GRAMMAR, max_tokens=100000, temperature=0.8, seed=3)
    send(qtbot, tab, "go on")
    qtbot.waitUntil(lambda: tab.generating and bool(tab.reply_text()), timeout=10000)
    quit_action = window.findChild(type(window.actions()[0]), "quit")
    quit_action.trigger()
    box = window.findChild(QMessageBox, "quit-confirm")
    assert box is not None and box.isVisible() and "being written" in box.text()
    assert not window.is_shut_down()
    # "Keep writing": nothing happens
    box.findChild(QPushButton, "keep-writing").click()
    qtbot.waitUntil(lambda: window.findChild(QMessageBox, "quit-confirm") is None, timeout=3000)
    assert tab.generating and not window.is_shut_down()
    quit_action.trigger()
    box = window.findChild(QMessageBox, "quit-confirm")
    assert box is not None
    reply_id = tab.reply_id
    box.findChild(QPushButton, "quit-anyway").click()
    qtbot.waitUntil(window.is_shut_down, timeout=5000)
    assert window.db.get_message(reply_id).status == "stopped"


def test_quit_without_a_reply_being_written_does_not_ask(qtbot: Any, make_window: Any) -> None:
    window, _ = make_window()
    window.request_quit()
    qtbot.waitUntil(window.is_shut_down, timeout=5000)


def test_a_narrow_window_hides_the_list_and_shortens_the_status(
    qtbot: Any, make_window: Any
) -> None:
    window, _ = make_window()
    tab = window.new_tab()
    assert tab is not None
    window.resize(1100, 700)
    qtbot.waitUntil(lambda: window.width() >= 1000, timeout=3000)
    wide_model_text = window.model_label.text()
    assert window.sidebar.isVisible() and not window.show_sidebar_button.isVisible()
    window.resize(700, 700)
    qtbot.waitUntil(lambda: window.sidebar.isHidden(), timeout=3000)
    assert window.show_sidebar_button.isVisible()
    assert len(window.model_label.text()) < len(wide_model_text)
    assert window.model_label.toolTip() == wide_model_text  # all of it in the tooltip
    assert tab.settings_button.text() == "Settings"
    window.show_sidebar_button.click()  # the button brings the list back
    assert window.sidebar.isVisible() and not window.show_sidebar_button.isVisible()
    window.show_sidebar_button.click() if window.show_sidebar_button.isVisible() else None
    window.sidebar_action.trigger()  # Ctrl+B hides it again
    assert window.sidebar.isHidden()
    window.resize(1100, 700)
    qtbot.waitUntil(lambda: not window.is_narrow(), timeout=3000)
    assert window.sidebar.isHidden()  # the user's choice holds
    assert tab.settings_button.text() == "Conversation settings"


def test_an_auto_hidden_list_comes_back_when_the_window_widens(
    qtbot: Any, make_window: Any
) -> None:
    window, _ = make_window()
    window.resize(700, 700)
    qtbot.waitUntil(lambda: window.sidebar.isHidden(), timeout=3000)
    window.resize(1100, 700)
    qtbot.waitUntil(window.sidebar.isVisible, timeout=3000)


def test_the_tab_menu_and_the_list_of_open_tabs(qtbot: Any, make_window: Any) -> None:
    window, _ = make_window()
    tabs = [window.new_tab() for _ in range(3)]
    assert all(t is not None for t in tabs)
    window._fill_tab_list()
    names = [a.text() for a in window.tab_list_menu.actions()]
    assert names == [t.title for t in tabs if t is not None]
    assert [a.isChecked() for a in window.tab_list_menu.actions()] == [False, False, True]
    window.tab_list_menu.actions()[0].trigger()
    assert window.current_tab() is tabs[0]
    menu = window.tab_menu(tabs[1])
    texts = [a.text() for a in menu.actions() if a.text()]
    assert "Rename…" in texts and "Close tab" in texts and "Close other tabs" in texts
    window._tab_context_menu(QPoint(-50, -50))  # not on a tab: no menu
    assert window.findChild(type(menu), "tab-menu") is menu
    rename = window.ask_rename(tabs[1])
    rename.setTextValue("Renamed from the tab")
    rename.accept()
    qtbot.waitUntil(lambda: tabs[1].title == "Renamed from the tab", timeout=3000)
    next(a for a in menu.actions() if a.text() == "Close other tabs").trigger()
    assert window.tabs() == [tabs[1]]


def test_help_lists_the_real_shortcuts_and_about_says_versions(
    qtbot: Any, make_window: Any
) -> None:
    window, _ = make_window()
    dialog = window.show_shortcuts()
    rows = dict((what, keys) for keys, what in dialog.rows())
    assert rows["New chat"] == "Ctrl+T" and rows["Send the message"] == "Enter"
    assert rows["Keyboard shortcuts"] == "Ctrl+/"
    dialog.close()
    about = window.show_about()
    text = about.text.text()
    assert "llama-cpp-python" in text and "0.3.36" in text and str(paths.data_dir()) in text
    about.close()


def test_enter_to_send_can_be_ctrl_enter(qtbot: Any, make_window: Any) -> None:
    window, _ = make_window()
    tab = window.new_tab()
    assert tab is not None
    set_sampling(tab, max_tokens=2)
    tab.composer.set_enter_sends(False)
    tab.composer.setPlainText("line one")
    tab.composer.moveCursor(tab.composer.textCursor().MoveOperation.End)
    qtbot.keyClick(tab.composer, Qt.Key.Key_Return)
    assert tab.composer.toPlainText() == "line one\n" and not tab.generating
    qtbot.keyClick(tab.composer, Qt.Key.Key_Return, Qt.KeyboardModifier.ControlModifier)
    wait_idle(qtbot, tab)
    assert window.db.get_thread(tab.cid)[0].content == "line one"


def test_the_demo_model_offers_first_prompts(
    qtbot: Any, make_window: Any, tiny_model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(paths, "demo_model_path", lambda: tiny_model)
    window, _ = make_window()
    assert window.welcome.prompts.isVisible()
    button = window.welcome.prompt_buttons[1]
    button.click()
    tab = window.current_tab()
    assert tab is not None
    wait_idle(qtbot, tab)
    assert window.db.get_thread(tab.cid)[0].content == button.text()


def test_other_models_get_no_demo_prompts(qtbot: Any, make_window: Any) -> None:
    window, _ = make_window()
    assert not window.welcome.prompts.isVisible()


def test_stop_all_and_apply_rebuilds_while_a_reply_is_written(qtbot: Any, make_window: Any) -> None:
    from PySide6.QtWidgets import QLabel, QSpinBox

    window, _ = make_window()
    window.show_model_manager()  # a dialog now, not a dock over the chats
    assert window.models_dialog is not None and window.models_dialog.isVisible()
    window.models_dialog.hide()
    tab = window.new_tab()
    assert tab is not None
    set_sampling(tab, grammar=ENDLESS_GRAMMAR, max_tokens=100000, temperature=0.8, seed=3)
    send(qtbot, tab, "hello")
    qtbot.waitUntil(lambda: tab.generating and bool(tab.reply_text()), timeout=10000)
    window.open_settings()
    panel = window.settings_panel()
    assert panel is not None
    qtbot.waitUntil(panel.isVisible)
    n_ctx = panel.findChild(QSpinBox, "field_n_ctx")
    n_ctx.setValue(1024)
    apply = panel.findChild(QPushButton, "applyButton")
    assert apply.text() == "Stop all and apply"
    apply.click()
    applied = panel.findChild(QLabel, "appliedLabel")
    qtbot.waitUntil(applied.isVisible, timeout=15000)
    assert "Applied" in applied.text() and "1,024" in applied.text()
    assert not tab.generating and window.model is not None and window.model.n_ctx == 1024
    assert apply.text() != "Stop all and apply"
    reply = window.db.get_thread(tab.cid)[-1]
    assert reply.role == "assistant" and reply.status == "stopped" and reply.content


def test_preferences_apply_to_the_open_chats(qtbot: Any, make_window: Any) -> None:
    window, _ = make_window()
    tab = window.new_tab()
    assert tab is not None
    assert tab.composer.enter_sends
    dialog = window.open_preferences()
    assert window.open_preferences() is dialog  # one dialog at a time
    dialog.ctrl_enter_sends.setChecked(True)
    dialog.font_spin.setValue(17)
    dialog.accept()
    qtbot.waitUntil(lambda: window._preferences is None, timeout=3000)
    assert window.app_settings.send_with_enter is False
    assert not tab.composer.enter_sends and "Ctrl+Enter" in tab.send_button.toolTip()
    assert tab.composer.font().pointSizeF() == 17 and tab.view.font().pointSizeF() == 17
    later = window.new_tab()  # a chat opened afterwards follows too
    assert later is not None and not later.composer.enter_sends
    assert later.composer.font().pointSizeF() == 17


def test_downloads_have_a_window_of_their_own(qtbot: Any, make_window: Any) -> None:
    window, _ = make_window()
    action = next(a for a in window.actions() if a.objectName() == "downloads")
    action.trigger()
    dialog = window.downloads_dialog()
    assert dialog.isVisible()


def test_the_title_follows_an_edited_first_message(qtbot: Any, make_window: Any) -> None:
    window, _ = make_window()
    tab = window.new_tab()
    assert tab is not None
    set_sampling(tab, max_tokens=2)
    send(qtbot, tab, "llamas")
    wait_idle(qtbot, tab)
    index = window.tab_widget.indexOf(tab)
    assert window.tab_widget.tabText(index) == "llamas"
    tab.edit(tab.branch[0].id)
    send(qtbot, tab, "alpacas instead")
    wait_idle(qtbot, tab)
    assert tab.title == "alpacas instead"
    assert window.tab_widget.tabText(index) == "alpacas instead"


def test_export_and_import_are_in_the_menus(qtbot: Any, make_window: Any) -> None:
    window, _ = make_window()
    tab = window.new_tab()
    assert tab is not None
    names = {a.objectName() for a in window.actions()}
    assert {"import", "export-all-markdown", "export-all-json"} <= names
    texts = [a.text() for a in window.tab_menu(tab).actions()]
    assert "Export as Markdown…" in texts and "Export as JSON…" in texts


def test_deleting_a_selection_is_one_undo(qtbot: Any, make_window: Any) -> None:
    window, _ = make_window()
    tabs = [window.new_tab() for _ in range(3)]
    for tab in tabs:
        assert tab is not None
        set_sampling(tab, max_tokens=2)
        send(qtbot, tab, f"chat {tab.cid}")
        wait_idle(qtbot, tab)
    sidebar = window.sidebar
    sidebar.refresh()
    view = sidebar.view

    def click(row: int, modifier: Qt.KeyboardModifier = Qt.KeyboardModifier.NoModifier) -> None:
        rect = view.visualRect(sidebar.model.index(row, 0))
        qtbot.mouseClick(view.viewport(), Qt.MouseButton.LeftButton, modifier, rect.center())

    click(0)
    click(1, Qt.KeyboardModifier.ControlModifier)
    chosen = sidebar.selected_ids()
    assert len(chosen) == 2
    view.setFocus()
    qtbot.keyClick(view, Qt.Key.Key_Delete)
    assert window.message_bar.text() == "Deleted 2 conversations."
    assert all(window.tab_for(cid) is None for cid in chosen)
    window.message_bar.action_button.click()
    assert sorted(window.db.get_conversation(cid).id for cid in chosen) == sorted(chosen)
    qtbot.waitUntil(lambda: set(chosen) <= {r.conversation_id for r in sidebar.model.rows})


def test_the_meter_counts_the_reply_reserve(qtbot: Any, make_window: Any) -> None:
    window, _ = make_window()
    tab = window.new_tab()
    assert tab is not None
    set_sampling(tab, max_tokens=100)
    send(qtbot, tab, "hello there")
    wait_idle(qtbot, tab)
    qtbot.waitUntil(lambda: tab.info.n_reserved == 100, timeout=5000)
    n, n_ctx = tab.info.n_tokens, tab.info.n_ctx
    assert n > 0 and tab.meter.value() == n + 100 and tab.meter.held() == n
    assert tab.meter_label.text() == f"{n:,} / {n_ctx:,} tokens · 100 kept for the reply"
    assert "100 are kept free for the reply" in tab.meter.toolTip()


def test_old_messages_out_of_the_context_are_marked(qtbot: Any, make_window: Any) -> None:
    # one tab of 512 tokens, 128 of them kept for the reply: a few long turns overflow
    window, _ = make_window(context={"n_ctx": 512, "n_seq_max": 1})
    tab = window.new_tab()
    assert tab is not None
    set_sampling(tab, max_tokens=4)
    assert tab.view.divider().isHidden()
    for i in range(6):
        send(qtbot, tab, f"turn {i}: " + " ".join(f"w{i}x{j}" for j in range(40)))
        wait_idle(qtbot, tab)
    qtbot.waitUntil(lambda: tab.info.n_dropped > 0, timeout=5000)
    start = tab.context_start()
    assert start is not None and tab.view.context_start_id() == start
    divider = tab.view.divider()
    assert divider.isVisible() and "no longer seen by the model" in divider.text()
    # the divider stands right above the first message the model still sees
    widget = tab.view.widget_for(start)
    assert widget is not None
    # Qt lays the column out on its next LayoutRequest event, not when the widget is added
    qtbot.waitUntil(
        lambda: widget.isVisible() and divider.geometry().bottom() <= widget.geometry().top(),
        timeout=5000,
    )
    assert n_dropped_messages(tab) == tab.info.n_dropped


def n_dropped_messages(tab: Any) -> int:
    ids = [w.data.id for w in tab.view.messages()]
    return ids.index(tab.context_start())


@pytest.mark.parametrize("trained_for_more", [False, True])
def test_a_message_too_long_says_what_can_be_done(
    qtbot: Any, make_window: Any, slow_model: Path, trained_for_more: bool
) -> None:
    # the context is 2,048 tokens; the slow model was trained for 4,096, the tiny one 2,048
    window, _ = make_window(model=slow_model) if trained_for_more else make_window()
    tab = window.new_tab()
    assert tab is not None
    send(qtbot, tab, " ".join(f"word{i}" for i in range(1200)))
    result = wait_idle(qtbot, tab)
    assert result.error is not None and tab.notice.text() == result.error
    if trained_for_more:  # a larger context would hold it
        assert "raise the context size (this model supports up to 4,096" in result.error
    else:  # it would not: no advice that cannot be followed
        assert "raise" not in result.error and "all this model can hold" in result.error


def test_the_tab_says_how_its_cache_came_back(qtbot: Any, make_window: Any) -> None:
    from app.session import RestoreOutcome
    from app.session import events as ev

    window, _ = make_window()
    tab = window.new_tab()
    assert tab is not None
    tab.on_event(ev.CacheRestored(tab.cid, RestoreOutcome.PARKED, "2 tabs are writing"))
    assert tab.state_label.text() == "idle · cache waiting for room (restored when you send)"
    assert "2 tabs are writing" in tab.state_label.toolTip()
    tab.on_event(ev.CacheRestored(tab.cid, RestoreOutcome.RESTORED))
    assert tab.state_label.text() == "idle · cache restored from disk"
    tab.on_event(ev.CacheRestored(tab.cid, RestoreOutcome.REREAD, "another model"))
    assert tab.state_label.text() == "idle · cache re-processed: another model"


def test_two_tabs_writing_together_get_the_same_rate(
    qtbot: Any, make_window: Any, slow_model: Path
) -> None:
    window, _ = make_window(model=slow_model)
    long_tab, short_tab = window.new_tab(), window.new_tab()
    assert long_tab is not None and short_tab is not None
    set_sampling(long_tab, grammar=ENDLESS_GRAMMAR, max_tokens=3000, temperature=0.8, seed=3)
    set_sampling(short_tab, grammar=ENDLESS_GRAMMAR, max_tokens=200, temperature=0.8, seed=5)
    # Both start together; the long one is stopped when the short one ends, so that both
    # rates cover the same steps (a step with one sequence is faster than with two).
    send(qtbot, short_tab, "a short one")
    send(qtbot, long_tab, "write a long one")
    short = wait_idle(qtbot, short_tab)
    long_tab.stop()
    long = wait_idle(qtbot, long_tab)
    assert short.n_tokens == 200 and 150 <= long.n_tokens < 3000  # it wrote alongside
    ratio = short.tokens_per_second / long.tokens_per_second
    assert 0.8 <= ratio <= 1.25, (short.tokens_per_second, long.tokens_per_second)


def test_a_reply_stopped_by_a_full_context_is_said_in_the_tab(qtbot: Any, make_window: Any) -> None:
    from app.session import ContextFullPolicy

    # one 256-token tab, "Stop the reply" when full, a reply that would not end
    window, _ = make_window(context={"n_ctx": 256, "n_seq_max": 1})
    tab = window.new_tab()
    assert tab is not None
    set_sampling(tab, grammar=ENDLESS_GRAMMAR, max_tokens=100000, temperature=0.8, seed=3)
    tab.policy.setCurrentIndex(tab.policy.findData(ContextFullPolicy.STOP.value))
    tab.policy.activated.emit(tab.policy.currentIndex())
    send(qtbot, tab, "go on and on")
    result = wait_idle(qtbot, tab)
    assert result.finish_reason.value == "context_full"
    assert "The context is full, so the reply stopped here" in tab.notice.text()  # not silent
    assert not tab.notice.error  # a notice: nothing failed
    reply = window.db.get_thread(tab.cid)[-1]
    assert reply.role == "assistant" and reply.content  # what it wrote is kept


def test_an_old_error_notice_goes_when_the_next_turn_starts(qtbot: Any, make_window: Any) -> None:
    window, _ = make_window()
    tab = window.new_tab()
    assert tab is not None
    send(qtbot, tab, " ".join(f"word{i}" for i in range(1200)))
    wait_idle(qtbot, tab)
    assert tab.notice.text()
    set_sampling(tab, max_tokens=2)
    send(qtbot, tab, "hello")
    wait_idle(qtbot, tab)
    assert tab.notice.text() == ""  # its "Try again" would answer an old message


def test_the_meter_moves_while_a_reply_streams(qtbot: Any, make_window: Any) -> None:
    window, _ = make_window()
    tab = window.new_tab()
    assert tab is not None
    # a reply that does not end (the context shifts when full): it is stopped below
    set_sampling(tab, grammar=ENDLESS_GRAMMAR, max_tokens=100000, temperature=0.8, seed=3)
    send(qtbot, tab, "go on")
    qtbot.waitUntil(lambda: tab.generating and tab.meter.held() > 0, timeout=10000)
    first = tab.meter.held()
    # the held part grows as the reply is written
    qtbot.waitUntil(lambda: tab.meter.held() > first + 50, timeout=10000)
    assert tab.generating
    assert tab.meter.value() <= tab.meter.maximum()
    tab.stop()
    wait_idle(qtbot, tab)


def test_a_window_notice_does_not_move_the_tab_bar(qtbot: Any, make_window: Any) -> None:
    window, _ = make_window()
    window.new_tab()
    bar = window.tab_widget.tabBar()
    top = bar.mapTo(window, QPoint(0, 0)).y()
    window.show_message("Something about the whole window.")
    qtbot.waitUntil(window.message_bar.isVisible, timeout=3000)
    qtbot.wait(50)
    assert bar.mapTo(window, QPoint(0, 0)).y() == top
    assert window.message_bar.mapTo(window, QPoint(0, 0)).y() > top


@pytest.mark.parametrize(("n_to_process", "still_restored"), [(9, True), (1466, False)])
def test_restored_from_disk_only_while_the_restored_cache_is_used(
    qtbot: Any, make_window: Any, n_to_process: int, still_restored: bool
) -> None:
    from app.session import RestoreOutcome, TurnId
    from app.session import events as ev
    from app.ui.tab_status import CacheNote, cache_note

    window, _ = make_window()
    tab = window.new_tab()
    assert tab is not None
    tab.on_event(ev.CacheRestored(tab.cid, RestoreOutcome.RESTORED))
    held = ev.SequenceStatus(tab.cid, 1475, 2048, True, False, False)
    tab.on_event(held)
    assert tab.state_label.text() == "idle · cache restored from disk"
    # a turn that re-reads 1,466 of the 1,475 tokens did not use the restored cache
    tab.on_event(ev.TurnStarted(tab.cid, TurnId(1), n_to_process))
    expected = CacheNote.RESTORED if still_restored else CacheNote.NONE
    assert cache_note(tab.info) is expected


def test_a_notice_about_the_model_goes_when_another_model_loads(
    qtbot: Any, make_window: Any, slow_model: Path
) -> None:
    window, _ = make_window(context={"n_ctx": 512})
    tab, other = window.new_tab(), window.new_tab()
    assert tab is not None and other is not None
    send(qtbot, tab, " ".join(f"word{i}" for i in range(600)))
    result = wait_idle(qtbot, tab)
    # a tab's notice is shown while the tab is (only the current one is on screen)
    assert result.error is not None and tab.notice.label.text() == result.error
    assert not tab.notice.isHidden()
    other.notify("The chat could not be saved: the disk is full.")  # not about the model
    window.load_model(str(slow_model))
    qtbot.waitUntil(
        lambda: window.model_ready() and window.model_path() == str(slow_model), timeout=20000
    )
    assert tab.notice.isHidden()  # it spoke of the 512-token context of the model before
    assert not other.notice.isHidden()
    assert other.notice.label.text() == "The chat could not be saved: the disk is full."


def test_counts_read_right_at_one_and_in_thousands(qtbot: Any, make_window: Any) -> None:
    from app.session import events as ev
    from app.ui.message_data import MessageData, figures_text

    one = MessageData(1, "assistant", "hi", token_count=1, prompt_tokens=1, cached_tokens=0)
    assert figures_text(one) == "1 token · prompt 1 token (0 cached)"
    many = MessageData(
        2, "assistant", "…", token_count=1234, prompt_tokens=5077, cached_tokens=4096
    )
    assert figures_text(many) == "1,234 tokens · prompt 5,077 tokens (4,096 cached)"
    window, _ = make_window(context={"n_seq_max": 1})
    assert "context 2,048 × 1 tab resident" in window.model_label.text()
    tab = window.new_tab()
    assert tab is not None
    tab.on_event(ev.ContextShifted(tab.cid, 1024))
    assert "the oldest 1,024 tokens of this conversation" in tab.notice.text()


def test_an_imported_chat_says_it_was_imported(
    qtbot: Any, make_window: Any, tmp_path: Path
) -> None:
    from app.storage.export import ExportFormat

    window, _ = make_window()
    db = window.db
    kept = db.create_conversation("Llamas")
    db.append_message(kept.id, "user", "What is a llama?")
    db.append_message(kept.id, "assistant", "A camelid.")
    path = tmp_path / "llamas.json"
    transfers = window.sidebar.transfers
    transfers.native_dialogs = False
    with qtbot.waitSignal(transfers.finished, timeout=10000):
        transfers.export_file([kept.id], ExportFormat.JSON, path)
    with qtbot.waitSignal(transfers.finished, timeout=10000) as blocker:
        transfers.import_paths([path])
    (imported,) = blocker.args[0].imported
    for cid, said in ((imported, True), (kept.id, False)):
        window.open_conversation(cid)
        tab = window.tab_for(cid)
        assert tab is not None
        first, reply = tab.view.messages()
        assert ("imported from llamas.json" in first.figures.text()) is said
        assert "imported" not in reply.figures.text()  # said once, by the first message


def test_after_a_restart_tokens_held_agrees_with_the_restored_tabs(
    qtbot: Any, make_window: Any
) -> None:
    from tests.ui.conftest import close_window

    window, _ = make_window()
    tabs = [window.new_tab(), window.new_tab()]
    for n, tab in enumerate(tabs):
        assert tab is not None
        send(qtbot, tab, f"tab {n} remembers {' and '.join(['llamas'] * (20 * (n + 1)))}")
        wait_idle(qtbot, tab)
    close_window(qtbot, window)
    window2, _ = make_window(write=False)
    reopened = [window2.tab_for(tab.cid) for tab in tabs]
    assert all(t is not None for t in reopened)

    def restored_tokens() -> int:
        return sum(t.info.n_tokens for t in reopened if t.info.restored and t.info.resident)

    qtbot.waitUntil(lambda: all(t.info.restored for t in reopened), timeout=10000)
    held = restored_tokens()
    assert held > 0
    # A tab counts its reply's last token, which the cache reads at the next turn: the
    # status bar's figure (what the cache holds) is at most one token a tab below.
    expected = {f"{n:,} / 2,048 tokens held" for n in range(held - len(reopened), held + 1)}

    def agrees() -> bool:
        return any(text in window2.memory_label.toolTip() for text in expected)

    try:  # (the tooltip has all the figures: a narrow window shows fewer)
        qtbot.waitUntil(agrees, timeout=3000)
    except Exception:
        raise AssertionError(f"{held:,} vs {window2.memory_label.toolTip()!r}") from None


def test_the_meter_counts_a_chat_that_is_not_cached_yet(
    qtbot: Any, make_window: Any, tmp_path: Path
) -> None:
    from app.storage.export import ExportFormat

    window, _ = make_window()
    db = window.db
    kept = db.create_conversation("Llamas")
    db.append_message(kept.id, "user", "What is a llama? " * 20)
    db.append_message(kept.id, "assistant", "A camelid of the Andes. " * 10)
    path = tmp_path / "llamas.json"
    transfers = window.sidebar.transfers
    transfers.native_dialogs = False
    with qtbot.waitSignal(transfers.finished, timeout=10000):
        transfers.export_file([kept.id], ExportFormat.JSON, path)
    with qtbot.waitSignal(transfers.finished, timeout=10000) as blocker:
        transfers.import_paths([path])
    (imported,) = blocker.args[0].imported
    window.open_conversation(imported)
    tab = window.tab_for(imported)
    assert tab is not None
    qtbot.waitUntil(lambda: tab.info.n_ctx > 0, timeout=10000)
    text = tab.meter_label.text()
    assert text.startswith("~") and "not cached yet" in text, text
    about = int(text[1:].split()[0].split("/")[0].replace(",", ""))
    assert about > 100  # 340 + 240 characters of text
    assert "an estimate" in tab.meter_label.toolTip()
    send(qtbot, tab, "and an alpaca?")
    wait_idle(qtbot, tab)
    # the session's own count now (its SequenceStatus can come just after the turn's end)
    qtbot.waitUntil(lambda: "not cached" not in tab.meter_label.text(), timeout=5000)
