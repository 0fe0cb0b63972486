"""Take the README's screenshots of the real window, with the demo model writing the replies.

    xvfb-run -s "-screen 0 1280x800x24" python docs/screenshots.py [--model PATH]

Every reply shown is generated live by the model (``resources/models/llamadesk-demo.gguf``
by default); nothing is stored in the database beforehand. Screens are grabbed from the X
server (``QScreen.grabWindow``), not rendered offscreen. Writes:

* ``main-window.png``: the README's picture, a real conversation in the first of three tabs;
* ``screenshot-first-start.png``: no model anywhere, the welcome page says what to do;
* ``screenshot-generating.png``: two tabs writing at once (the demo model writes ~1000
  tokens a second, so the script paces the engine's steps to catch the replies mid-way);
* ``screenshot-settings.png``: the context settings dialog over the window;
* ``screenshot-models.png``: the model manager, a broken download next to the model;
* ``screenshot-dark.png``: the conversation again with View ▸ Theme ▸ Dark;
* ``screenshot-narrow.png``: the window 720 px wide (the conversation list hidden).

Without the demo model (and no ``--model``) a tiny generated model stands in; its replies
are noise, and the script says so.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
OUT = ROOT / "docs"

CONVERSATION = [
    "Hi! My name is Ilse.",
    "How do I fork a conversation?",
    "What is 23 + 45?",
    "What is my name?",
]
OTHER_TABS = [["What can you do?"], ["How do I close a tab?"]]
GENERATING = ["What can you do?", "What does LlamaDesk do?"]
CONTEXT = {"n_seq_max": 4, "n_threads": 1, "n_threads_batch": 1}  # else the defaults
PACE_S = 0.06  # per engine step while the "generating" screenshot is taken
SEED = 42


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", type=Path, default=None)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    home = Path(tempfile.mkdtemp(prefix="llamadesk-shots-"))
    os.environ["LLAMADESK_HOME"] = str(home)

    from PySide6.QtCore import QEventLoop, QLoggingCategory, QRect, QTimer  # noqa: TID251
    from PySide6.QtGui import QGuiApplication  # noqa: TID251
    from PySide6.QtWidgets import QApplication  # noqa: TID251

    QLoggingCategory.setFilterRules("qt.text.font.db.warning=false")
    app = QApplication.instance() or QApplication(sys.argv)
    assert isinstance(app, QApplication)
    app.setApplicationName("LlamaDesk")

    from app import paths
    from app.engine import Engine
    from app.storage import AppSettings, Database, SamplingDefaults, save_settings
    from app.ui.main import app_icon
    from app.ui.main_window import MainWindow

    app.setWindowIcon(app_icon())
    model = args.model
    demo = paths.demo_model_path()
    if model is None and demo.is_file():
        model = demo
    real = model is not None
    if model is None:
        from tests.support.gguf_models import TinySpec, write_tiny_model

        print("no demo model: a tiny generated model stands in (its replies are noise)")
        model = write_tiny_model(home / "tiny-test-llama.gguf", TinySpec())

    # Pacing: the worker thread sleeps after each engine step while this is set.
    pace = threading.Event()
    step = Engine.step

    def paced_step(self: Engine) -> list[Any]:
        events = step(self)
        if pace.is_set():
            time.sleep(PACE_S)
        return events

    Engine.step = paced_step  # type: ignore[method-assign]

    def wait(ms: int) -> None:
        loop = QEventLoop()
        QTimer.singleShot(ms, loop.quit)
        loop.exec()

    def until(cond: Any, timeout: float = 60) -> None:
        end = time.monotonic() + timeout
        while not cond() and time.monotonic() < end:
            wait(20)
        if not cond():
            raise TimeoutError("the window did not get there in time")

    def grab(name: str, *widgets: Any, settle_ms: int = 400) -> None:
        if settle_ms:
            wait(settle_ms)
        screen = QGuiApplication.primaryScreen()
        assert screen is not None
        area = QRect()
        for widget in widgets:
            area = area.united(widget.frameGeometry())
        area = area.intersected(screen.geometry())  # never past the screen's edge
        screen.grabWindow(0).copy(area).save(str(out / name))
        print("wrote", out / name)

    def new_window() -> Any:
        window = MainWindow(Database.open())
        window.resize(1180, 740)
        window.move(50, 30)
        window.show()
        window.start()
        return window

    def close(window: Any) -> None:
        window.close()
        until(window.is_shut_down)
        window.db.close()

    def ask(tab: Any, text: str) -> None:
        tab.composer.setPlainText(text)
        tab.send()
        until(lambda: not tab.generating, 120)

    # 1. first start: no model anywhere
    save_settings(AppSettings(context=dict(CONTEXT)))
    saved_demo = paths.demo_model_path
    paths.demo_model_path = lambda: home / "none.gguf"  # type: ignore[assignment]
    window = new_window()
    grab("screenshot-first-start.png", window)
    close(window)
    paths.demo_model_path = saved_demo  # type: ignore[assignment]

    # 2. the main picture: real replies in three tabs, the first one shown
    save_settings(
        AppSettings(
            last_model_path=str(model),
            context=dict(CONTEXT),
            default_sampling=SamplingDefaults(seed=SEED),  # the same replies every run
        )
    )
    from app.ui.model_manager import read_metadata

    db = Database.open()  # the model is in the library, as if added in the model manager
    db.add_model_file(str(model), read_metadata)
    db.close()
    window = new_window()
    until(window.model_ready)
    tabs = []
    for questions in [CONVERSATION, *OTHER_TABS]:
        tab = window.new_tab()
        assert tab is not None
        tabs.append(tab)
        for question in questions:
            ask(tab, question)
    main_tab = tabs[0]
    window.tab_widget.setCurrentWidget(main_tab)
    window.sidebar.refresh()
    main_tab.composer.setFocus()
    grab("main-window.png", window)

    # 3. two tabs writing at once
    live = []
    pace.set()
    for question in GENERATING:
        tab = window.new_tab()
        assert tab is not None
        tab.composer.setPlainText(question)
        tab.send()
        live.append(tab)
    until(lambda: all(len(t.reply_text()) > 30 for t in live), 30)
    live[-1].settings_button.setChecked(True)
    grab("screenshot-generating.png", window, settle_ms=60)
    live[-1].settings_button.setChecked(False)
    pace.clear()
    until(lambda: not any(t.generating for t in live))

    # 4. the settings dialog
    window.tab_widget.setCurrentWidget(main_tab)
    window.open_settings()
    panel = window.settings_panel()
    if panel is not None:
        until(panel.isVisible)
        grab("screenshot-settings.png", window, panel)
        panel.close()

    # 5. the model manager, a broken download next to the model
    folder = home / "Downloads"
    folder.mkdir()
    (folder / "broken-download.gguf").write_bytes(b"GGUF\x03\x00\x00\x00" + b"\xff" * 64)
    window.db.add_folder(folder)
    window.show_model_manager()
    manager = window.model_manager()
    if manager is not None:
        manager.refresh()
        until(lambda: not manager.is_scanning())
    dialog = window.models_dialog
    grab("screenshot-models.png", window, dialog)
    if dialog is not None:
        dialog.hide()

    # 6. dark
    window.set_theme("dark")
    grab("screenshot-dark.png", window)
    window.set_theme("system")

    # 7. narrow: the list hides (the Chats button brings it back), the status shortens
    size = window.size()
    window.resize(720, 640)
    wait(300)
    grab("screenshot-narrow.png", window)
    window.resize(size)

    replies = {tab.title: [m.content for m in tab.branch if m.role == "assistant"] for tab in tabs}
    close(window)
    print(json.dumps({"model": str(model), "real_model": real, "replies": replies}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
