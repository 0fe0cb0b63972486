"""The README's screenshots of issue 20 (templates, true figures, polish), from the real
window on a real (virtual) screen: a base model's new chat and its template, the meter
while a reply streams, two tabs sharing the thread, stop strings, a new chat's starters
with an API client's conversation listed at once, deleting one message, and dark mode
after a switch with a notice showing (no light strip).

Run under Xvfb with Qt's xcb platform (DESIGN.md section 4 lists the libraries):

    xvfb-run -a -s "-screen 0 1280x800x24" env QT_QPA_PLATFORM=xcb \\
        python resources/screenshots/make_screenshots.py

Writes PNGs next to this file. A temporary LLAMADESK_HOME keeps the user's data out; the
models are the demo model (when it is there) and a tiny base model the script writes (a
Gemma-like vocabulary and no chat template of its own, as the tests use).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(ROOT))


def spin(cond: Any, timeout: float) -> bool:
    from PySide6.QtCore import QCoreApplication, QEventLoop  # noqa: TID251

    end = time.monotonic() + timeout
    while not cond() and time.monotonic() < end:
        QCoreApplication.processEvents(QEventLoop.ProcessEventsFlag.AllEvents, 20)
        time.sleep(0.01)
    return bool(cond())


def settle(seconds: float = 0.4) -> None:
    spin(lambda: False, seconds)


def save(widget: Any, name: str) -> None:
    settle()
    path = HERE / name
    widget.grab().save(str(path))
    print(path)


def save_screen(window: Any, name: str) -> None:
    """The window as the screen shows it, with the dialogs open over it."""
    from PySide6.QtGui import QGuiApplication  # noqa: TID251

    settle()
    screen = QGuiApplication.primaryScreen()
    path = HERE / name
    screen.grabWindow(0).copy(window.geometry()).save(str(path))
    print(path)


def open_window(model: Path, context: dict[str, Any], **extra: Any) -> tuple[Any, Any]:
    from app import paths
    from app.storage import Database
    from app.ui.main_window import MainWindow

    data: dict[str, Any] = {"last_model_path": str(model), "context": context, **extra}
    paths.settings_path().write_text(json.dumps(data), encoding="utf-8")
    db = Database.open()
    window = MainWindow(db)
    window.resize(1100, 720)
    window.show()
    window.start()
    if not spin(window.model_ready, 120):
        raise SystemExit(f"{model} did not load")
    return window, db


def close(window: Any, db: Any) -> None:
    window.close()
    spin(window.is_shut_down, 15)
    db.close()


def set_sampling(tab: Any, **values: Any) -> None:
    sampling = {**tab.conversation.sampling, **values}
    tab.db.update_conversation_settings(tab.cid, sampling=sampling)
    tab.conversation = tab.db.get_conversation(tab.cid)
    tab.settings.set_values(tab.conversation.system_prompt, tab.conversation.sampling)


def api_conversation(window: Any) -> None:
    """Start the window's server and name a conversation from an HTTP client (a thread;
    the event loop keeps running): the sidebar lists it when it is stored."""
    import threading

    import httpx2

    from app.server.app_settings import ServerAppSettings

    controller = window.server
    controller.update_settings(ServerAppSettings(port=0))
    controller.start()
    if not spin(lambda: controller.running, 20):
        print("the server did not start:", controller.status.message)
        return
    before = {r.conversation_id for r in window.sidebar.model.rows}
    body = {
        "messages": [{"role": "user", "content": "Hello from a script"}],
        "max_tokens": 8,
        "conversation": "from-a-script",
    }
    url = f"{controller.url}/v1/chat/completions"
    thread = threading.Thread(target=lambda: httpx2.post(url, json=body, timeout=60))
    thread.start()
    spin(lambda: not thread.is_alive(), 60)
    spin(lambda: {r.conversation_id for r in window.sidebar.model.rows} - before, 10)
    controller.stop()
    spin(lambda: not controller.running, 10)


def main() -> int:
    home = Path(tempfile.mkdtemp(prefix="llamadesk-shots-"))
    os.environ["LLAMADESK_HOME"] = str(home)
    from PySide6.QtWidgets import QApplication  # noqa: TID251

    app = QApplication.instance() or QApplication(sys.argv)
    from app import paths
    from tests.engine.test_template_choice import write_gemma_vocab_model

    context = {"n_ctx": 4096, "n_seq_max": 2, "n_threads": 1, "n_threads_batch": 1}

    # 1. a base model without a template: which template it got and why, and the picker
    base = write_gemma_vocab_model(home / "gemma-3-base-no-template.gguf")
    window, db = open_window(base, context)
    window.new_tab()
    save(window, "issue20-template-new-chat.png")
    window.open_settings()
    panel = window.settings_panel()
    assert panel is not None
    panel.resize(760, 700)
    save(panel, "issue20-template-settings.png")
    panel.close()
    close(window, db)

    # 5 and 6: the meter while a reply streams, two tabs sharing the thread, stop strings
    model = paths.demo_model_path()
    # words and paragraphs without an end keep it writing (text that wraps)
    grammar = (
        'root ::= (word (" " word)* (". " | ".\\n\\n"))+\n'
        "word ::= [a-zA-Z] [a-z]? [a-z]? [a-z]? [a-z]? [a-z]? [a-z]?"
    )
    if not model.is_file():
        from tests.support.gguf_models import TinySpec, write_tiny_model

        model = write_tiny_model(home / "tiny.gguf", TinySpec())
        grammar = 'root ::= ("hello" | " world" | " tab" | " llama" | "\\n\\n- item") root'
    window, db = open_window(model, context)
    first, second = window.new_tab(), window.new_tab()
    for i, tab in enumerate((first, second)):
        set_sampling(tab, grammar=grammar, max_tokens=100000, temperature=0.8, seed=i + 1)
    window.tab_widget.setCurrentWidget(first)
    first.composer.setPlainText("Tell me a long story about a llama who keeps a desk tidy.")
    first.send()
    spin(lambda: len(first.reply_text()) > 1500, 120)
    save(window, "issue20-meter-streaming.png")
    second.composer.setPlainText("And a second one, at the same time.")
    second.send()
    spin(lambda: "share" in first.state_label.text(), 30)
    save(window, "issue20-two-tabs-share.png")
    first.stop()
    second.stop()
    spin(lambda: not first.generating and not second.generating, 20)
    third = window.new_tab()
    assert third is not None
    third.settings_button.setChecked(True)
    third.stop_strings.setPlainText("\\nUser:\nThe end")
    save(window, "issue20-new-chat-and-stop-strings.png")
    third.settings_button.setChecked(False)

    # 6: an API client's conversation is in the list at once; a new chat's starters
    api_conversation(window)
    fourth = window.new_tab()
    assert fourth is not None
    save(window, "issue20-new-chat-starters-and-api-chat.png")

    # 6: a single message deleted: the question says what becomes of the replies below
    window.tab_widget.setCurrentWidget(first)
    settle()
    first.view.messages()[0].delete_button.click()
    save_screen(window, "issue20-delete-message.png")
    from PySide6.QtWidgets import QMessageBox  # noqa: TID251

    box = first.findChild(QMessageBox, "delete-message")
    if box is not None:
        box.reject()

    # 6: dark mode, switched from light with a notice showing: no light strip
    window.set_theme("light")
    window.show_message("A notice shown before the switch to dark.", error=False)
    window.set_theme("dark")
    window.tab_widget.setCurrentWidget(fourth)
    save(window, "issue20-dark-no-light-strip.png")
    window.set_theme("system")
    close(window, db)
    app.processEvents()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
