"""The window's next start after a crash in llama.cpp (issue 27, item 1c).

:mod:`app.crash_record` left the model and what it was doing (loading or decoding) and a
fault file proving a fatal signal came. The window then says so, does not load that model
by itself, and offers to load it with safe settings: without llama.cpp's extra CPU buffer
types (AMX, weight repacking; llama-server's ``--no-repack``), where the crashes seen so far
were.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from app import crash_record
from app.engine import load_check
from app.ui.message_bar import MessageBar

SAFE_ACTION = "Load with safe settings"


def crash_message(record: crash_record.CrashRecord, remembered: bool = False) -> str:
    """``remembered``: the model's later loads go without the faster CPU kernels (the
    load check keeps that verdict: app.engine.load_check.remember_crash)."""
    if remembered:
        return (
            f"The last session ended in a crash while {record.doing}. LlamaDesk did not "
            "load it again; from now on it loads with safe settings (without llama.cpp's "
            "faster CPU kernels): load it, or choose another model."
        )
    return (
        f"The last session ended in a crash while {record.doing}. LlamaDesk did not load "
        "it again; load it with safe settings (without llama.cpp's faster CPU kernels) or "
        "choose another model."
    )


def announce(
    bar: MessageBar, load_safe: Callable[[str], None], record: crash_record.CrashRecord
) -> None:
    """Say the last session's crash in ``bar`` (whichever model it was, also when no
    model is loaded at this start), with the action that loads it by ``load_safe``; the
    load check keeps that this model loads the safe way (not only this once)."""
    model = record.model
    remembered = bool(load_check.remember_crash(Path(model)))
    bar.show_message(
        crash_message(record, remembered), True, action=(SAFE_ACTION, lambda: load_safe(model))
    )


def holds_back(record: crash_record.CrashRecord | None, path: str) -> bool:
    """Whether the start's automatic load of ``path`` must not happen: the last session
    crashed with it."""
    return record is not None and _same_file(path, record.model)


def _same_file(a: str, b: str) -> bool:
    try:
        return Path(a).resolve() == Path(b).resolve()
    except OSError:
        return a == b
