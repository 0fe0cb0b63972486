"""A session loader that remembers where the model's layers went, for ``run --json``'s
``devices`` list and for saying the plan (:class:`LocalLoader` places them: the device
fields are part of the :class:`~app.engine.ModelSettings` it is given)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from app.engine import ContextSettings, ModelSettings
from app.session.engine_port import Loaded, Progress
from app.session.local_engine import LocalEngine, LocalLoader

if TYPE_CHECKING:
    from app.engine.offload import Placement


class OffloadLoader(LocalLoader):
    def __init__(self) -> None:
        self.placement: Placement | None = None

    def load(
        self,
        path: str,
        settings: ContextSettings,
        progress: Progress,
        fallback: bool,
        *,
        model_settings: ModelSettings | None = None,
    ) -> Loaded:
        loaded = super().load(path, settings, progress, fallback, model_settings=model_settings)
        if isinstance(loaded.engine, LocalEngine) and loaded.engine.engine.model is not None:
            self.placement = loaded.engine.engine.model.placement
        return loaded
