"""The window around the chats: first start, model manager, sidebar, keyboard, safety."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QTableWidget

from app import paths
from app.ui import markdown
from tests.ui.conftest import send, wait_idle

CODE_REPLY = "Some code:\n\n```python\nprint('hi')\n```\n"


def markdown_message(mid: int, role: str, text: str) -> Any:
    from app.ui.chat_view import MessageData

    return MessageData(mid, role, text, token_count=5, tokens_per_second=9.5)


def test_first_start_without_a_model_explains_what_to_do(qtbot: Any, make_window: Any) -> None:
    window, _ = make_window(model=None)
    assert not window.model_ready()
    assert window.stack.currentWidget() is window.welcome
    text = window.welcome.text.text()
    assert "No model is loaded" in text and "model manager" in text
    assert window.welcome.models_button.isVisible()
    assert window.model_label.text() == "No model loaded"
    assert window.message_bar.text() == ""  # nothing looks broken
    # a chat can be opened, and it says what to do instead of failing
    tab = window.new_tab()
    assert tab is not None and "No model is loaded" in tab.view._placeholder.text()
    send(qtbot, tab, "hello?")
    assert not tab.generating and "Load a model first" in tab.notice.text()
    assert window.message_bar.text() == ""  # the notice is the tab's, not the window's


def test_demo_model_is_loaded_by_default(
    qtbot: Any, make_window: Any, tiny_model: Path, monkeypatch: Any, tmp_path: Path
) -> None:
    demo = tmp_path / "resources" / "llamadesk-demo.gguf"
    demo.parent.mkdir()
    shutil.copy(tiny_model, demo)
    monkeypatch.setattr(paths, "demo_model_path", lambda: demo)
    window, _ = make_window(model=None, wait_model=False)
    qtbot.waitUntil(window.model_ready, timeout=10000)
    assert window.model_path() == str(demo)
    assert window.stack.currentWidget() is window.welcome
    assert window.welcome.new_button.isVisible()


def test_broken_model_file_in_the_model_manager(
    qtbot: Any, make_window: Any, tiny_model: Path, tmp_path: Path
) -> None:
    folder = tmp_path / "models"
    folder.mkdir()
    good = folder / "good.gguf"
    shutil.copy(tiny_model, good)
    broken = folder / "broken.gguf"
    broken.write_bytes(b"GGUF" + b"\x03\x00\x00\x00" + b"\xff" * 64)
    window, _ = make_window()
    window.db.add_folder(folder)
    window.show_model_manager()
    manager = window.model_manager()
    assert manager is not None and window.models_dialog is not None
    assert window.models_dialog.isVisible()
    manager.refresh()
    qtbot.waitUntil(lambda: not manager.is_scanning(), timeout=15000)
    entries = {Path(e.path).name: e for e in window.db.list_models()}
    assert entries["good.gguf"].metadata and entries["good.gguf"].error is None
    assert entries["broken.gguf"].error  # listed, with its problem, next to the good one
    table = manager.findChild(QTableWidget)
    assert table is not None and table.rowCount() >= 2
    loaded_before = window.model_path()
    manager.loadRequested.emit(str(broken))
    qtbot.waitUntil(lambda: "broken.gguf" in window.message_bar.text(), timeout=10000)
    assert window.message_bar.error
    assert window.model_path() == loaded_before  # the loaded model was kept
    manager.loadRequested.emit(str(good))
    qtbot.waitUntil(lambda: window.model_path() == str(good), timeout=10000)
    tab = window.new_tab()
    send(qtbot, tab, "hello")
    assert wait_idle(qtbot, tab).finish_reason in ("eog", "length")


def test_sidebar_search_rename_pin_delete_undo(qtbot: Any, make_window: Any) -> None:
    window, _ = make_window()
    tab = window.new_tab()
    send(qtbot, tab, "llamas like mountains")
    wait_idle(qtbot, tab)
    other = window.new_tab()
    send(qtbot, other, "the cache and the state")
    wait_idle(qtbot, other)
    sidebar = window.sidebar
    sidebar.refresh()
    assert [r.conversation_id for r in sidebar.model.rows][:2] == [other.cid, tab.cid]
    # search
    qtbot.keyClick(window, Qt.Key.Key_F, Qt.KeyboardModifier.ControlModifier)
    sidebar.search.setText("mountains")
    sidebar.refresh()
    qtbot.waitUntil(lambda: [r.conversation_id for r in sidebar.model.rows] == [tab.cid])
    assert "«mountains»" in sidebar.model.rows[0].subtitle
    sidebar.search.clear()
    sidebar.refresh()
    # rename through the model (what the inline editor does)
    index = sidebar.model.index(1, 0)
    assert sidebar.model.setData(index, "Mountain talk")
    assert window.db.get_conversation(tab.cid).title == "Mountain talk"
    qtbot.waitUntil(
        lambda: "Mountain talk" in window.tab_widget.tabText(window.tab_widget.indexOf(tab))
    )
    # pin moves it first
    sidebar.pinRequested.emit(tab.cid, True)
    assert sidebar.model.rows[0].conversation_id == tab.cid and sidebar.model.rows[0].pinned
    # delete closes its tab, Undo brings it back
    sidebar.deleteRequested.emit(tab.cid)
    assert window.tab_for(tab.cid) is None
    assert tab.cid not in [r.conversation_id for r in sidebar.model.rows]
    assert "Deleted" in window.message_bar.text()
    qtbot.mouseClick(window.message_bar.action_button, Qt.MouseButton.LeftButton)
    assert tab.cid in [r.conversation_id for r in sidebar.model.rows]
    restored = window.tab_for(tab.cid)
    assert restored is not None and restored.branch[0].content == "llamas like mountains"
    # opening from the list focuses the open tab instead of opening another
    window.tab_widget.setCurrentWidget(other)
    sidebar.openRequested.emit(tab.cid)
    assert window.current_tab() is restored and window.tab_widget.count() == 2


def test_keyboard_shortcuts(qtbot: Any, make_window: Any) -> None:
    window, _ = make_window()
    window.activateWindow()
    ctrl = Qt.KeyboardModifier.ControlModifier
    qtbot.keyClick(window, Qt.Key.Key_T, ctrl)
    qtbot.keyClick(window, Qt.Key.Key_T, ctrl)
    assert window.tab_widget.count() == 2
    assert window.tab_widget.currentIndex() == 1
    qtbot.keyClick(window, Qt.Key.Key_Tab, ctrl)
    assert window.tab_widget.currentIndex() == 0
    qtbot.keyClick(window, Qt.Key.Key_Tab, ctrl | Qt.KeyboardModifier.ShiftModifier)
    assert window.tab_widget.currentIndex() == 1
    qtbot.keyClick(window, Qt.Key.Key_Comma, ctrl)
    panel = window.settings_panel()
    assert panel is not None and panel.isVisible()
    panel.close()
    qtbot.keyClick(window, Qt.Key.Key_W, ctrl)
    qtbot.keyClick(window, Qt.Key.Key_W, ctrl)
    assert window.tab_widget.count() == 0
    assert window.stack.currentWidget() is window.welcome
    # empty chats that were closed do not clutter the list
    window.sidebar.refresh()
    assert window.sidebar.model.rows == []


def test_markdown_is_safe_and_highlighted() -> None:
    text = (
        "Hi <b>bold</b> <script>alert(1)</script> ![cat](https://example.com/cat.png) "
        "[x](file:///etc/passwd) [ok](https://example.org)\n\n"
        '<img src="https://example.com/a.png">\n\n'
        "```python\nprint('hi')\n```\n"
    )
    out = markdown.render(text)
    assert "<img" not in out.html and "<script" not in out.html and "<b>" not in out.html
    assert "&lt;b&gt;bold&lt;/b&gt;" in out.html and "&lt;img" in out.html
    assert 'href="file:' not in out.html and 'href="https://example.org"' in out.html
    assert out.code_blocks == ["print('hi')"]
    assert f'href="{markdown.COPY_CODE_PREFIX}0"' in out.html
    assert "style=" in out.html  # highlighted with inline colours


def test_streamed_html_is_shown_as_text_and_code_can_be_copied(
    qtbot: Any, make_window: Any
) -> None:
    from PySide6.QtGui import QGuiApplication

    from app.ui.chat_view import ChatView, MessageData

    view = ChatView()
    qtbot.addWidget(view)
    view.set_messages(
        [
            MessageData(1, "user", "<i>not italic</i>"),
            MessageData(2, "assistant", "<b>raw</b>\n\n```\ncode here\n```"),
        ]
    )
    user, reply = view.messages()
    assert "&lt;i&gt;" in user.content.text()
    assert "&lt;b&gt;raw&lt;/b&gt;" in reply.content.text()
    reply.content.linkActivated.emit(markdown.COPY_CODE_PREFIX + "0")
    clipboard = QGuiApplication.clipboard()
    assert clipboard is not None and clipboard.text() == "code here"


def test_theme_menu_switches_at_once_and_is_remembered(qtbot: Any, make_window: Any) -> None:
    from PySide6.QtGui import QPalette
    from PySide6.QtWidgets import QApplication

    from app.storage import AppSettings, load_settings
    from app.ui import theme

    window, _ = make_window()
    tab = window.new_tab()
    tab.view.set_messages(
        [markdown_message(1, "user", "hi"), markdown_message(2, "assistant", CODE_REPLY)]
    )
    reply = tab.view.last()
    try:
        assert window.theme_actions["system"].isChecked()
        window.theme_actions["dark"].trigger()
        qtbot.waitUntil(lambda: reply.data.content and theme.DARK_CODE_BG in reply.content.text())
        app = QApplication.instance()
        assert isinstance(app, QApplication)
        assert app.palette().color(QPalette.ColorRole.Window).lightness() < 100
        assert theme.is_dark() and window.theme_actions["dark"].isChecked()
        assert load_settings(AppSettings).theme == "dark"
        # figures and text stay readable: light text on the dark message background
        bg = reply.palette().color(QPalette.ColorRole.Window)
        fg = reply.figures.palette().color(
            QPalette.ColorGroup.Disabled, QPalette.ColorRole.WindowText
        )
        assert bg.lightness() < 80 and fg.lightness() - bg.lightness() > 60
        window.theme_actions["light"].trigger()
        qtbot.waitUntil(lambda: theme.LIGHT_CODE_BG in reply.content.text())
        assert app.palette().color(QPalette.ColorRole.Window).lightness() > 200
        assert reply.palette().color(QPalette.ColorRole.Window).lightness() > 200
        assert load_settings(AppSettings).theme == "light"
    finally:
        window.set_theme("system")
    assert theme.current_theme() == "system" and load_settings(AppSettings).theme == "system"


def test_window_icon_files() -> None:
    from app.ui.main import ICON_SIZES, app_icon

    for size in ICON_SIZES:
        assert (paths.resources_dir() / "icons" / f"llamadesk-{size}.png").is_file()
    icon = app_icon()
    assert not icon.isNull()
    assert {s.width() for s in icon.availableSizes()} >= set(ICON_SIZES)


def test_exit_after_show(tmp_path: Path) -> None:
    """LLAMADESK_EXIT_AFTER_SHOW=1 (the packaged-app test): shown, closed, saved, code 0."""
    import json
    import os
    import subprocess
    import sys

    env = {
        **os.environ,
        "LLAMADESK_HOME": str(tmp_path / "home"),
        "LLAMADESK_EXIT_AFTER_SHOW": "1",
        "QT_QPA_PLATFORM": "offscreen",
    }
    code = "import sys; from app.ui.main import run; sys.exit(run(['llamadesk']))"
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=root, env=env, timeout=60, capture_output=True
    )
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-2000:]
    saved = json.loads((tmp_path / "home" / "settings.json").read_text())
    assert saved["window_geometry"]  # closed the normal way: the window was saved


def test_status_bar_shows_the_context_the_model_got(qtbot: Any, make_window: Any) -> None:
    # the tiny model was trained for 2,048 tokens: a larger setting is held to that
    window, _ = make_window(context={"n_ctx": 4096})
    assert "context 2,048 × 4 tabs resident" in window.model_label.text()
    tab = window.new_tab()
    qtbot.waitUntil(lambda: "/ 2,048 tokens" in tab.meter_label.text(), timeout=5000)
    window.open_settings()
    panel = window.settings_panel()
    assert panel is not None
    estimate = panel.findChild(QLabel, "estimateLabel")
    assert estimate is not None and "trained for 2,048 tokens" in estimate.text()
    panel.close()
