"""A session loader that places the model's layers: :class:`LocalLoader` with model settings.

:class:`app.session.local_engine.LocalLoader` loads with the default
:class:`~app.engine.ModelSettings` (everything on the CPU); this one passes the device
fields (GPU layers, split, devices, RPC workers) and keeps the placement llama.cpp got, for
``run --json``'s ``devices`` list and for saying the plan.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from app.engine import ContextSettings, ModelSettings
from app.errors import LlamaDeskError
from app.session.engine_port import Loaded, Progress
from app.session.local_engine import LocalEngine, LocalLoader

if TYPE_CHECKING:
    from app.engine.offload import Placement


class OffloadLoader(LocalLoader):
    def __init__(self, model_settings: ModelSettings) -> None:
        model_settings.validate()
        self.model_settings = model_settings
        self.placement: Placement | None = None

    def load(
        self, path: str, settings: ContextSettings, progress: Progress, fallback: bool
    ) -> Loaded:
        from app.engine import Engine

        engine = Engine()
        warning: str | None = None
        try:
            engine.load_model(path, self.model_settings, progress=progress)
            try:
                engine.create_context(settings)
            except LlamaDeskError as exc:
                if not fallback:
                    raise
                engine.create_context(
                    ContextSettings(
                        n_threads=settings.n_threads, n_threads_batch=settings.n_threads_batch
                    )
                )
                warning = f"{exc} LlamaDesk used the default context settings instead."
            self.placement = engine.model.placement if engine.model is not None else None
        except BaseException:
            engine.close()
            raise
        return Loaded(LocalEngine(engine), warning)
