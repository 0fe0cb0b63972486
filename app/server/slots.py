"""llama-server's ``POST /slots/{id}?action=save|restore|erase``.

A slot is an API conversation as ``GET /slots`` lists it. Save writes its cache to a file
in one folder (the states folder's ``slots/``), restore loads such a file back, erase drops
the cache from memory. File names are checked before any path is built from them: one
name, no folders, a plain character set, so a client can neither read nor write anywhere
else.
"""

from __future__ import annotations

import re
import time
from concurrent.futures import Future
from pathlib import Path
from typing import Any, TypeVar

from app.errors import LlamaDeskError
from app.fsutil import make_private_dir
from app.server.errors import ApiError, bad_request, unavailable
from app.server.params import expect_object, get_str
from app.server.pool import ApiConversation, ConversationPool
from app.session import RestoreOutcome, Session

SLOT_TIMEOUT_S = 120.0  # a large cache takes a while to write on a slow disk
MAX_NAME = 128
# A leading letter or digit: no hidden files, no "." or "..", no option-looking names.
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
ACTIONS = ("save", "restore", "erase")

T = TypeVar("T")


def check_filename(name: str | None) -> str:
    """The name unchanged when it is safe to join to the slots folder, else a 400."""
    if name is None or not name:
        raise bad_request("'filename' (the slot file's name) is required.", "filename")
    if len(name) > MAX_NAME:
        raise bad_request(f"'filename' is longer than {MAX_NAME} characters.", "filename")
    if ".." in name or not NAME_PATTERN.fullmatch(name):
        raise bad_request(
            "'filename' must be a plain file name: letters, digits, '.', '_' and '-', "
            "starting with a letter or digit, no folders and no '..'.",
            "filename",
        )
    return name


class SlotActions:
    """Save, restore and erase for one service's conversations."""

    def __init__(self, session: Session, pool: ConversationPool, folder: Path | None) -> None:
        """``folder``: where slot files go (None: save and restore are refused)."""
        self._session = session
        self._pool = pool
        self.folder = folder

    def run(self, index: int, action: str | None, body: Any) -> dict[str, Any]:
        if action not in ACTIONS:
            raise bad_request(
                f"'action' must be save, restore or erase, not {action!r} "
                "(POST /slots/0?action=save).",
                "action",
            )
        path: Path | None = None
        if action != "erase":
            path = self._path(expect_object(body) if body is not None else {})
            if action == "restore" and not path.is_file():
                raise ApiError(
                    404,
                    f"There is no slot file {path.name!r}; save one first "
                    "(POST /slots/{id}?action=save).",
                    param="filename",
                    code="file_not_found",
                )
        conv = self._pool.take_slot(index)
        tokens: tuple[int, ...] | None = None
        try:
            t0 = time.perf_counter()
            if action == "erase":
                n_erased = len(self._tokens(conv))
                self._pool.erase(conv)
                tokens = ()
                return {"id_slot": index, "n_erased": n_erased}
            assert path is not None
            if action == "save":
                size = self._wait(self._session.save_state_file(conv.cid, str(path)))
                ms = (time.perf_counter() - t0) * 1000
                return {
                    "id_slot": index,
                    "filename": path.name,
                    "n_saved": len(self._tokens(conv)),
                    "n_written": size,
                    "timings": {"save_ms": round(ms, 3)},
                }
            restored = self._wait(self._session.restore_state_file(conv.cid, str(path)))
            ms = (time.perf_counter() - t0) * 1000
            tokens = self._tokens(conv)
            if restored.outcome is RestoreOutcome.PARKED:
                # Kept, and restored when the slot is next used (other requests hold the
                # room now): a success that says so, not an error.
                return {
                    "id_slot": index,
                    "filename": path.name,
                    "n_restored": 0,
                    "n_read": path.stat().st_size,
                    "parked": True,
                    "reason": restored.reason,
                    "timings": {"restore_ms": round(ms, 3)},
                }
            if restored.outcome is not RestoreOutcome.RESTORED:
                raise bad_request(
                    f"The slot file {path.name!r} was not restored: "
                    f"{restored.reason or 'it does not fit this model and context.'}",
                    "filename",
                )
            return {
                "id_slot": index,
                "filename": path.name,
                "n_restored": len(tokens),
                "n_read": path.stat().st_size,
                "timings": {"restore_ms": round(ms, 3)},
            }
        finally:
            self._pool.release(conv, tokens)

    def _path(self, body: dict[str, Any]) -> Path:
        if self.folder is None:
            raise ApiError(
                400,
                "This server keeps no slot files (it runs without a states folder).",
                code="slots_unavailable",
            )
        name = check_filename(get_str(body, "filename"))
        try:
            make_private_dir(self.folder, tighten=True)
        except OSError as exc:
            raise unavailable(f"The slots folder cannot be made: {exc.strerror or exc}.") from None
        return self.folder / name

    def _tokens(self, conv: ApiConversation) -> tuple[int, ...]:
        return self._wait(self._session.inspect(conv.cid)).tokens

    @staticmethod
    def _wait(future: Future[T]) -> T:
        try:
            return future.result(SLOT_TIMEOUT_S)
        except TimeoutError:
            raise unavailable("The engine did not answer in time; retry.", "timeout") from None
        except LlamaDeskError as exc:
            raise bad_request(str(exc)) from None


def slot_index(path: str) -> int:
    """The ``{id}`` of ``/slots/{id}``."""
    text = path.removeprefix("/slots/")
    if not text.isdigit() or len(text) > 6:
        raise bad_request(f"{text!r} is not a slot number (GET /slots lists them).", "id_slot")
    return int(text)
