"""A label that says where a model's layers would go before it is loaded (the model
manager and the Devices settings): the plan is computed off the GUI thread (it reads the
GGUF's tensor table and asks remote workers, in pure Python, for their memory)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtWidgets import QLabel, QWidget

from app.engine import ContextSettings
from app.errors import LlamaDeskError
from app.ui.background import BackgroundJobs
from app.ui.devices_settings import load_device_settings


class _Bridge(QObject):
    """Lives on the GUI thread; the job's pool thread emits through it (queued)."""

    planned = Signal(int, str)  # request number, the sentence


class PlanLabel(QLabel):
    """``show_plan(path)``: "Plan: 22 of 28 layers on CUDA0 (...), 6 on the CPU; 4 tabs of
    8k" for that file with the saved device choices and ``context()``'s settings."""

    def __init__(
        self,
        context: Callable[[], ContextSettings] | None = None,
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self.setObjectName("planLabel")
        self.setWordWrap(True)
        self.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self._context = context or ContextSettings
        self._jobs = BackgroundJobs("device-plan")
        self._bridge = _Bridge()
        self._bridge.planned.connect(self._on_planned)
        self._request = 0
        self.path: str | None = None

    def show_plan(self, path: str | None) -> None:
        self._request += 1
        self.path = path
        if not path:
            self.setText("")
            self.hide()
            return
        self.setText("Plan: working out where the layers would go…")
        self.show()
        request, settings, context = self._request, load_device_settings(), self._context()
        # The job holds the bridge itself, not only its signal: a label closed meanwhile
        # (its Python object collected) must not free the object the pool thread emits on.
        bridge = self._bridge

        def job() -> None:  # on a pool thread
            from app.engine.offload_preview import preview

            try:
                shown = preview(path, settings.model_settings(), context)
                text = f"Plan: {shown.text}." + "".join(f" {p}" for p in shown.problems)
            except (LlamaDeskError, OSError) as exc:
                text = f"No plan for {Path(path).name}: {exc}"
            try:
                bridge.planned.emit(request, text)
            except RuntimeError:  # the application is gone
                pass

        self._jobs.submit(job)

    def set_context(self, context: Callable[[], ContextSettings]) -> None:
        self._context = context

    def refresh(self) -> None:
        self.show_plan(self.path)

    def _on_planned(self, request: int, text: str) -> None:
        if request == self._request:
            try:
                self.setText(text)
            except RuntimeError:  # the label was closed while its plan was worked out
                pass

    def wait_idle(self, timeout_s: float = 10.0) -> bool:
        return self._jobs.wait_idle(timeout_s)
