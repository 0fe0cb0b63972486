"""Issue 20 in the window: the chat template in use and why, the user's template per
model, stop strings per conversation, why tabs slow together, and the warning before a
thread count that oversubscribes.

Real window, real engine on its thread, tiny generated models (one with a Gemma-like
vocabulary and no template of its own); nothing mocked.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from PySide6.QtWidgets import QLabel

from app.engine.chat_template import TemplateSource
from app.engine.threads import machine_cores
from app.session import FinishReason
from app.ui.tab_intro import intro_text, sharing_text
from app.ui.tab_stop_strings import decode_line, encode_string, parse_lines
from app.ui.template_picker import AUTOMATIC_TEXT, BASE_IN_USE, in_use_text
from tests.engine.test_template_choice import write_gemma_vocab_model
from tests.ui.conftest import ENDLESS_GRAMMAR, send, set_sampling, wait_idle


@pytest.fixture(scope="module")
def base_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_gemma_vocab_model(tmp_path_factory.mktemp("base") / "base-no-template.gguf")


def open_panel(qtbot: Any, window: Any) -> Any:
    window.open_settings()
    panel = window.settings_panel()
    assert panel is not None
    qtbot.waitUntil(panel.isVisible, timeout=3000)
    return panel


def test_a_base_model_says_which_template_it_got_and_why(
    qtbot: Any, make_window: Any, base_model: Path
) -> None:
    window, _ = make_window(model=base_model)
    choice = window.model.chat_template
    assert (choice.name, choice.source) == ("gemma", TemplateSource.BUILTIN_BY_VOCABULARY)
    tab = window.new_tab()
    assert tab is not None
    # the empty chat: the file, that it is a base model, its context, the template and why
    text = tab.view._placeholder.text()
    assert "base-no-template.gguf" in text and "A base model" in text
    assert f"{window.model.n_ctx_seq:,} tokens of context" in text
    assert "Template: gemma." in text and "<start_of_turn>" in text
    panel = open_panel(qtbot, window)
    picker = panel.template_picker
    assert picker.combo.currentText() == AUTOMATIC_TEXT
    # a base model completes text (issue 28): the template a chat would get is said too
    assert picker.in_use.text() == f"{BASE_IN_USE} {in_use_text(choice)}".replace(
        "In use: gemma", "A chat would get gemma"
    )
    assert "built-in, chosen by the vocabulary" in picker.in_use.text()


def test_the_template_chosen_for_a_model_is_used_and_kept(
    qtbot: Any, make_window: Any, base_model: Path
) -> None:
    window, _ = make_window(model=base_model)
    panel = open_panel(qtbot, window)
    picker = panel.template_picker
    picker.chosen.emit("chatml")
    qtbot.waitUntil(lambda: window.model.chat_template.name == "chatml", timeout=5000)
    assert window.model.chat_template.source is TemplateSource.USER_CHOICE
    assert window.app_settings.model_chat_templates == {str(base_model): "chatml"}
    assert picker.combo.currentData() == "chatml" and "your choice" in picker.in_use.text()
    tab = window.new_tab()
    assert tab is not None and "Template: chatml." in tab.view._placeholder.text()
    # a reply is written with it (the turn runs; what the tiny model says is noise)
    set_sampling(tab, max_tokens=4)
    send(qtbot, tab, "hello")
    assert not wait_idle(qtbot, tab).error
    # back to automatic: the vocabulary's choice again, and nothing kept
    picker.chosen.emit("")
    qtbot.waitUntil(lambda: window.model.chat_template.name == "gemma", timeout=5000)
    assert window.app_settings.model_chat_templates == {}


def test_a_kept_template_is_used_at_the_next_start_and_a_file_can_be_chosen(
    qtbot: Any, make_window: Any, base_model: Path, tmp_path: Path
) -> None:
    template = tmp_path / "mine.jinja"
    template.write_text(
        "{% for m in messages %}<start_of_turn>{{ m.role }}\n{{ m.content }}<end_of_turn>\n"
        "{% endfor %}<start_of_turn>model\n",
        encoding="utf-8",
    )
    window, _ = make_window(model=base_model, model_chat_templates={str(base_model): "llama3"})
    assert window.model.chat_template.name == "llama3"
    assert window.model.chat_template.source is TemplateSource.USER_CHOICE
    window.settings_ui.choose_chat_template(str(template))
    qtbot.waitUntil(lambda: window.model.chat_template.name == "mine", timeout=5000)
    chosen = window.model.chat_template  # read again: mypy keeps the narrowing from above
    assert chosen.source is TemplateSource.USER_FILE
    assert window.app_settings.model_chat_templates[str(base_model)] == str(template)


def test_a_template_that_cannot_be_used_is_said_and_not_kept(
    qtbot: Any, make_window: Any, base_model: Path, tmp_path: Path
) -> None:
    gone = str(tmp_path / "gone.jinja")
    # a kept file that has gone since: said, dropped, the model loads with its automatic one
    window, _ = make_window(model=base_model, model_chat_templates={str(base_model): gone})
    assert window.model.chat_template.name == "gemma"
    assert "neither a bundled chat template" in window.message_bar.text()
    assert window.app_settings.model_chat_templates == {}
    window.settings_ui.choose_chat_template("no-such-template")
    assert "neither a bundled chat template" in window.message_bar.text()
    assert window.app_settings.model_chat_templates == {}
    assert window.model.chat_template.name == "gemma"


def test_stop_strings_are_a_conversation_setting(qtbot: Any, make_window: Any) -> None:
    window, _ = make_window()
    tab = window.new_tab()
    assert tab is not None
    set_sampling(tab, grammar='root ::= "hello world again"', max_tokens=20, temperature=0.0)
    tab.settings_button.setChecked(True)
    tab.stop_strings.setPlainText("world\n\n\\nUser:")
    qtbot.waitUntil(lambda: bool(tab.conversation.sampling.get("stop")), timeout=3000)
    stored = window.db.get_conversation(tab.cid).sampling["stop"]
    assert stored == ["world", "\nUser:"]
    send(qtbot, tab, "say it")
    result = wait_idle(qtbot, tab)
    assert result.finish_reason is FinishReason.STOP
    assert "world" not in result.text and result.text.startswith("hello")
    # another conversation has none
    other = window.new_tab()
    assert other is not None and other.stop_strings.strings() == []


def test_stop_string_lines_read_escapes() -> None:
    assert decode_line("\\nUser:") == "\nUser:"
    assert decode_line("a\\tb\\\\n") == "a\tb\\n"
    assert decode_line("C:\\path") == "C:\\path"  # an unknown escape stays as typed
    for text in ("\nUser:", "a\tb", "back\\slash", "plain"):
        assert decode_line(encode_string(text)) == text
    assert parse_lines("a\n\nb\na\n") == ["a", "b"]


def test_two_tabs_say_they_share_the_threads(qtbot: Any, make_window: Any) -> None:
    window, _ = make_window()
    first, second = window.new_tab(), window.new_tab()
    assert first is not None and second is not None
    for i, tab in enumerate((first, second)):
        set_sampling(tab, grammar=ENDLESS_GRAMMAR, max_tokens=100000, temperature=0.8, seed=i)
    send(qtbot, first, "one")
    qtbot.waitUntil(lambda: bool(first.reply_text()), timeout=10000)
    assert "share" not in first.state_label.text()  # alone: nothing to say
    send(qtbot, second, "two")
    threads = window.model.settings.n_threads
    want = sharing_text(2, threads)
    assert want == f"2 tabs share {threads} CPU thread" + ("" if threads == 1 else "s")
    qtbot.waitUntil(lambda: want in first.state_label.text(), timeout=10000)
    qtbot.waitUntil(lambda: want in second.state_label.text(), timeout=10000)
    # the tooltip says how they share a step (the choice made when the model loaded)
    batching = window.model.batching
    assert batching is not None
    assert batching.reason in first.state_label.toolTip()
    assert "decoded" in first.state_label.toolTip()
    second.stop()
    wait_idle(qtbot, second)
    qtbot.waitUntil(lambda: "share" not in first.state_label.text(), timeout=5000)
    first.stop()
    wait_idle(qtbot, first)


def test_a_thread_count_that_oversubscribes_is_warned_before_apply(
    qtbot: Any, make_window: Any
) -> None:
    window, _ = make_window()
    panel = open_panel(qtbot, window)
    warning = panel.findChild(QLabel, "threadsWarning")
    assert warning is not None and warning.isHidden()
    cores = machine_cores()
    editor = panel._editors["n_threads"]
    editor.setValue(cores)
    if cores > 1:
        assert warning.isVisible() and f"{cores} generation threads" in warning.text()
        assert f"{cores - 1} (all cores but one) is safer" in warning.text()
    editor.setValue(max(1, cores - 1))
    assert warning.isHidden()


def test_the_intro_without_a_model_says_what_to_do() -> None:
    assert "No model is loaded yet" in intro_text(None)


def test_the_sidebar_selection_follows_new_tabs_and_forks(qtbot: Any, make_window: Any) -> None:
    window, _ = make_window()
    first = window.new_tab()
    assert first is not None
    set_sampling(first, max_tokens=4)
    send(qtbot, first, "a first chat")
    wait_idle(qtbot, first)
    window.sidebar.refresh()
    assert window.sidebar.selected_ids() == [first.cid]
    second = window.new_tab()  # an empty new chat: listed, and the selection moves to it
    assert second is not None
    qtbot.waitUntil(lambda: window.sidebar.selected_ids() == [second.cid], timeout=3000)
    window.fork_from(first, first.leaf_id())
    fork = window.current_tab()
    assert fork is not None and fork.cid not in (first.cid, second.cid)
    qtbot.waitUntil(lambda: window.sidebar.selected_ids() == [fork.cid], timeout=3000)


def test_a_thread_count_of_0_says_it_becomes_1(qtbot: Any, make_window: Any) -> None:
    window, _ = make_window()
    panel = open_panel(qtbot, window)
    warning = panel.findChild(QLabel, "threadsWarning")
    editor = panel._editors["n_threads"]
    editor.setValue(1)
    editor.stepBy(-1)  # the arrows stop at 1
    assert editor.value() == 1
    # typed: taken, said, and used as 1
    editor.lineEdit().selectAll()
    qtbot.keyClicks(editor.lineEdit(), "0")
    assert editor.value() == 0
    assert warning is not None and warning.isVisible()
    assert "A thread count of 0 is not possible: 1 thread is used." in warning.text()
    assert panel.current_settings().n_threads == 1
    editor.setValue(1)
    assert warning.isHidden()
