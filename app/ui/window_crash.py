"""The window's next start after a crash in llama.cpp (issue 27, item 1c).

:mod:`app.crash_record` left the model and what it was doing (loading or decoding) and a
fault file proving a fatal signal came. The window then says so, does not load that model
by itself, and offers to load it with safe settings: without llama.cpp's extra CPU buffer
types (AMX, weight repacking; llama-server's ``--no-repack``), where the crashes seen so far
were.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from app import crash_record

if TYPE_CHECKING:
    from app.ui.main_window import MainWindow

SAFE_ACTION = "Load with safe settings"


def crash_message(record: crash_record.CrashRecord) -> str:
    return (
        f"The last session ended in a crash while {record.doing}. LlamaDesk did not load "
        "it again; load it with safe settings (without llama.cpp's faster CPU kernels) or "
        "choose another model."
    )


def hold_back(win: MainWindow, path: str) -> bool:
    """Before the start's automatic load of ``path``: whether it must not happen (the last
    session crashed with it). The crash is said whichever model it was."""
    record = crash_record.last_window_crash()
    if record is None:
        return False
    model = record.model
    win.message_bar.show_message(
        crash_message(record),
        True,
        action=(SAFE_ACTION, lambda: win.models_ui.load_model(model, safe=True)),
    )
    return _same_file(path, model)


def _same_file(a: str, b: str) -> bool:
    try:
        return Path(a).resolve() == Path(b).resolve()
    except OSError:
        return a == b
