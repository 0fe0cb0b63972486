"""Take the README's screenshots of the real window (run under a display, e.g. Xvfb).

    xvfb-run -s "-screen 0 1280x800x24" python docs/screenshots.py [--model PATH]

Uses the demo model when it exists, else a tiny generated model (whose replies are
noise: the Markdown conversation shown is then one stored in the database beforehand).
Screens are grabbed from the X server (QScreen.grabWindow), not rendered offscreen.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
OUT = ROOT / "docs"

SAMPLE_QUESTION = "How do I read a file line by line in Python?"
SAMPLE_ANSWER = """Open the file with a `with` block and iterate over it: Python reads one line at a time, so even a huge file never has to fit in memory.

```python
from pathlib import Path

with Path("notes.txt").open(encoding="utf-8") as handle:
    for number, line in enumerate(handle, start=1):
        print(number, line.rstrip("\\n"))
```

A few things worth knowing:

- `rstrip("\\n")` drops the line break that each line keeps.
- Pass `encoding=` explicitly; the default depends on the system.
- For a small file, `Path("notes.txt").read_text().splitlines()` is shorter.

<b>Raw HTML</b> in a reply is shown as text, never interpreted."""


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", type=Path, default=None)
    args = parser.parse_args()
    home = Path(tempfile.mkdtemp(prefix="llamadesk-shots-"))
    os.environ["LLAMADESK_HOME"] = str(home)

    from PySide6.QtCore import QEventLoop, QLoggingCategory, QTimer  # noqa: TID251
    from PySide6.QtGui import QGuiApplication  # noqa: TID251
    from PySide6.QtWidgets import QApplication  # noqa: TID251

    QLoggingCategory.setFilterRules("qt.text.font.db.warning=false")
    app = QApplication.instance() or QApplication(sys.argv)
    app.setApplicationName("LlamaDesk")

    from app import paths
    from app.storage import AppSettings, Database, save_settings

    model = args.model
    demo = paths.demo_model_path()
    real_text = False
    if model is None and demo.is_file():
        model, real_text = demo, True
    if model is None:
        from tests.support.gguf_models import TinySpec, write_tiny_model

        model = write_tiny_model(home / "tiny-test-llama.gguf", TinySpec())

    def wait(ms: int) -> None:
        loop = QEventLoop()
        QTimer.singleShot(ms, loop.quit)
        loop.exec()

    def until(cond: Any, timeout: float = 60) -> None:
        end = time.monotonic() + timeout
        while not cond() and time.monotonic() < end:
            wait(30)

    def shot(name: str) -> None:
        wait(400)
        screen = QGuiApplication.primaryScreen()
        assert screen is not None
        pixmap = screen.grabWindow(0)
        geo = window.frameGeometry()
        pixmap.copy(geo).save(str(OUT / name))
        print("wrote", OUT / name)

    from app.ui.main_window import MainWindow

    # 1. first start: no model anywhere
    save_settings(AppSettings(context={"n_threads": 1, "n_threads_batch": 1}))
    db = Database.open()
    saved_demo = paths.demo_model_path
    paths.demo_model_path = lambda: home / "none.gguf"  # type: ignore[assignment]
    window = MainWindow(db)
    window.resize(1180, 740)
    window.move(40, 30)
    window.show()
    window.start()
    shot("screenshot-first-start.png")
    window.close()
    until(window.is_shut_down)
    db.close()
    paths.demo_model_path = saved_demo  # type: ignore[assignment]

    # 2. chats: a stored conversation with Markdown and code, and live tabs
    save_settings(
        AppSettings(
            last_model_path=str(model),
            context={"n_ctx": 4096, "n_seq_max": 4, "n_threads": 1, "n_threads_batch": 1},
        )
    )
    db = Database.open()
    if not real_text:
        conv = db.create_conversation()
        user = db.add_message(conv.id, "user", SAMPLE_QUESTION)
        db.add_message(
            conv.id,
            "assistant",
            SAMPLE_ANSWER,
            user.id,
            token_count=141,
            prompt_tokens=38,
            tokens_per_second=42.7,
        )
        for title in ("Trip to the Andes: packing list", "Regex for ISO dates", "Llama facts"):
            c = db.create_conversation(title)
            db.add_message(c.id, "user", title)
    window = MainWindow(db)
    window.resize(1180, 740)
    window.move(40, 30)
    window.show()
    window.start()
    until(window.model_ready)
    if real_text:
        tab = window.new_tab()
        assert tab is not None
        tab.composer.setPlainText(SAMPLE_QUESTION)
        tab.send()
        until(lambda: not tab.generating, 120)
    else:
        window.sidebar.refresh()
        window.open_conversation(window.sidebar.model.rows[-1].conversation_id)
    shot("screenshot-chat.png")

    # two tabs generating at once
    grammar = 'root ::= ("hello" | " world" | " llama" | " tab" | ". ") root'
    live = []
    for text in ("Tell me a story about a llama.", "Write a poem about tabs."):
        tab = window.new_tab()
        assert tab is not None
        if not real_text:
            sampling = {**tab.conversation.sampling, "grammar": grammar, "max_tokens": 100000}
            db.update_conversation_settings(tab.cid, sampling=sampling)
            tab.conversation = db.get_conversation(tab.cid)
            tab.settings.set_values(tab.conversation.system_prompt, tab.conversation.sampling)
        tab.composer.setPlainText(text)
        tab.send()
        live.append(tab)
    wait(1500)
    live[-1].settings_button.setChecked(True)
    shot("screenshot-generating.png")
    live[-1].settings_button.setChecked(False)
    for tab in live:
        tab.stop()
    until(lambda: not any(t.generating for t in live))

    # settings panel
    window.open_settings()
    panel = window.settings_panel()
    if panel is not None:
        panel.move(window.x() + 220, window.y() + 60)
        panel.raise_()
        wait(300)
        screen = QGuiApplication.primaryScreen()
        assert screen is not None
        wait(400)
        screen.grabWindow(0).copy(window.frameGeometry().united(panel.frameGeometry())).save(
            str(OUT / "screenshot-settings.png")
        )
        print("wrote", OUT / "screenshot-settings.png")
        panel.close()

    # model manager with a broken file next to a good one
    folder = home / "models"
    folder.mkdir()
    shutil.copy(model, folder / Path(str(model)).name)
    (folder / "broken-download.gguf").write_bytes(b"GGUF\x03\x00\x00\x00" + b"\xff" * 64)
    db.add_folder(folder)
    window.show_model_manager()
    manager = window.model_manager()
    if manager is not None:
        manager.refresh()
        until(lambda: not manager.is_scanning())
    window.models_dock.setMinimumHeight(260)
    shot("screenshot-models.png")

    window.close()
    until(window.is_shut_down)
    db.close()
    print(json.dumps({"model": str(model), "real_text": real_text}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
