"""The window's next start after a crash in llama.cpp (issue 27, item 1c): it says which
model crashed while doing what, does not load that model by itself, and offers to load it
with safe settings (no extra CPU buffer types)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from app import crash_record
from app.engine import load_check
from app.ui.window_crash import SAFE_ACTION, crash_message


def _crashed_session(model: Path, phase: str = "decoding") -> crash_record.CrashRecord:
    """What a window that died of SIGSEGV leaves: its record and a non-empty fault file
    (faulthandler's), under the pid of a process that is gone."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    folder = crash_record.folder()
    folder.mkdir(parents=True, exist_ok=True)
    record = {"model": str(model), "phase": phase, "pid": proc.pid}
    crash_record.record_path(crash_record.WINDOW).write_text(json.dumps(record))
    (folder / f"window-{proc.pid}.fault").write_text("Fatal Python error: Segmentation fault\n")
    return crash_record.CrashRecord(str(model), crash_record.Phase(phase), proc.pid)


def test_the_next_start_says_so_and_offers_safe_settings(
    qtbot: Any, make_window: Any, tiny_model: Path
) -> None:
    record = _crashed_session(tiny_model)
    window, _ = make_window(model=tiny_model, wait_model=False)
    bar = window.message_bar
    assert bar.text() == crash_message(record, True)
    assert bar.text().startswith(
        f"The last session ended in a crash while decoding with the model {tiny_model.name}."
    )
    assert bar.action_button.isVisible() and bar.action_button.text() == SAFE_ACTION
    # Not loaded by itself.
    qtbot.wait(300)
    assert window.models_ui.loading_path is None and not window.model_ready()

    bar.action_button.click()
    qtbot.waitUntil(window.model_ready, timeout=15000)
    assert window.model_path() == str(tiny_model)
    extra = window.session.call(lambda engine: engine.model.settings.use_extra_bufts)
    assert extra.result(10) is False
    # Not only this once: a plain load of that model goes the safe way too, and says so.
    window.load_model(str(tiny_model))
    qtbot.waitUntil(lambda: window.models_ui.loading_path is None, timeout=15000)
    qtbot.waitUntil(window.model_ready, timeout=15000)
    notice = window.session.call(lambda engine: engine.model.load_notice)
    assert notice.result(10) == load_check.CRASHED_NOTICE.format(name=tiny_model.name)


def test_a_crash_while_loading_another_model_still_loads_the_last_one(
    qtbot: Any, make_window: Any, tiny_model: Path, tiny_model_twin: Path
) -> None:
    record = _crashed_session(tiny_model_twin, phase="loading")
    window, _ = make_window(model=tiny_model, wait_model=False)
    assert window.message_bar.text() == crash_message(record, True)
    assert "while loading the model twin.gguf" in window.message_bar.text()
    qtbot.waitUntil(window.model_ready, timeout=15000)
    assert window.model_path() == str(tiny_model)
    extra = window.session.call(lambda engine: engine.model.settings.use_extra_bufts)
    assert extra.result(10) is True
    # The twin is a byte copy (the same header): the crash's verdict holds for it too.
    notice = window.session.call(lambda engine: engine.model.load_notice)
    assert notice.result(10) == load_check.CRASHED_NOTICE.format(name=tiny_model.name)


def test_the_crash_is_said_also_when_no_model_is_loaded_at_start(
    qtbot: Any, make_window: Any, tiny_model: Path, monkeypatch: Any
) -> None:
    """No last model and no demo model: nothing is loaded, and the crash is still said
    (it was thrown away before, unread)."""
    from app import paths

    monkeypatch.setattr(paths, "demo_model_path", lambda: paths.data_dir() / "no-demo.gguf")
    record = _crashed_session(tiny_model)
    window, _ = make_window(model=None, wait_model=False)
    assert window.message_bar.text() == crash_message(record, True)
    assert window.message_bar.action_button.text() == SAFE_ACTION
    qtbot.wait(200)
    assert window.models_ui.loading_path is None and not window.model_ready()


def test_start_window_reads_the_crash_then_records_this_session(
    qtbot: Any, tiny_model: Path, tiny_model_twin: Path
) -> None:
    """app/ui/main.py's order: the last crash is read before this session's record is
    kept (which removes the old files), and the record is kept before the load starts."""
    import os

    from app.storage import Database
    from app.ui.main import start_window
    from app.ui.main_window import MainWindow
    from tests.ui.conftest import close_window, write_settings

    record = _crashed_session(tiny_model_twin, phase="loading")
    write_settings(tiny_model)
    db = Database.open()
    window = MainWindow(db)
    try:
        window.show()
        start_window(window)
        assert window.message_bar.text() == crash_message(record, True)
        assert not (crash_record.folder() / f"window-{record.pid}.fault").exists()
        qtbot.waitUntil(window.model_ready, timeout=15000)
        mine = crash_record.read(crash_record.WINDOW)
        assert mine is not None and mine.pid == os.getpid() and mine.model == str(tiny_model)
    finally:
        close_window(qtbot, window)
        db.close()
        crash_record.end_window_watch()
        crash_record.install(None)


def test_no_crash_no_word(qtbot: Any, make_window: Any, tiny_model: Path) -> None:
    window, _ = make_window(model=tiny_model)
    assert "crash" not in window.message_bar.text()


def test_a_window_that_crashes_decoding_leaves_what_the_next_start_reads(
    tiny_model: Path, tmp_path: Path
) -> None:
    """The whole way: a real window process (offscreen) whose first decode dies of SIGSEGV
    leaves its record and faulthandler's file; the next start finds the crash."""
    import os

    from app.engine.context import FAULT_DECODE_ENV
    from tests.ui.conftest import write_settings

    write_settings(tiny_model)
    root = Path(__file__).resolve().parents[2]
    env = dict(os.environ, PYTHONPATH=str(root), QT_QPA_PLATFORM="offscreen")
    env[FAULT_DECODE_ENV] = "1"
    done = subprocess.run(
        [sys.executable, "-m", "app"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == -11, (done.returncode, done.stderr[-2000:])
    found = crash_record.last_window_crash()
    assert found == crash_record.CrashRecord(
        str(tiny_model), crash_record.Phase.DECODING, found.pid if found else 0
    )
    fault = crash_record.folder() / f"window-{found.pid}.fault"
    assert "Segmentation fault" in fault.read_text()


def test_a_clean_end_leaves_no_record(tiny_model: Path) -> None:
    import os

    from tests.ui.conftest import write_settings

    write_settings(tiny_model)
    root = Path(__file__).resolve().parents[2]
    env = dict(os.environ, PYTHONPATH=str(root), QT_QPA_PLATFORM="offscreen")
    env["LLAMADESK_EXIT_AFTER_SHOW"] = "1"
    done = subprocess.run(
        [sys.executable, "-m", "app"], cwd=root, env=env, capture_output=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert crash_record.folder().is_dir()  # the window kept its record while it ran
    assert list(crash_record.folder().iterdir()) == []
    assert crash_record.last_window_crash() is None
