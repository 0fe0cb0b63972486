"""The README's screenshots of issue 20 (templates, true figures, polish), from the real
window on a real (virtual) screen.

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
    close(window, db)
    app.processEvents()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
