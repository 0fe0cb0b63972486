"""The session loader of ``run``, ``serve --rpc`` and the window: it remembers where the
model's layers went (``run --json``'s ``devices`` list, the plan said in words), and it
runs a model that uses remote (RPC) devices where llama.cpp's aborts cannot reach its
process: a private ``llamadesk serve`` child reached as a remote engine
(:class:`~app.rpc_supervisor.PrivateServer`). :class:`LocalLoader` places the layers: the
device fields are part of the :class:`~app.engine.ModelSettings` it is given.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from app.engine import ContextSettings, ModelSettings
from app.engine.errors import ContextError
from app.rpc_supervisor import PrivateServer, in_child
from app.session.engine_port import Loaded, Progress
from app.session.local_engine import LocalEngine, LocalLoader

if TYPE_CHECKING:
    from app.engine.offload import Placement

log = logging.getLogger(__name__)


class OffloadLoader(LocalLoader):
    """``on_gone``: told a sentence when a private server's model process ends by itself."""

    def __init__(self, on_gone: Callable[[str], None] | None = None) -> None:
        self.placement: Placement | None = None
        self.private: PrivateServer | None = None
        self._on_gone = on_gone

    def load(
        self,
        path: str,
        settings: ContextSettings,
        progress: Progress,
        fallback: bool,
        *,
        model_settings: ModelSettings | None = None,
    ) -> Loaded:
        self.close()
        self.placement = None
        if model_settings is not None and model_settings.rpc_servers.strip() and not in_child():
            return self._load_private(path, settings, progress, fallback, model_settings)
        loaded, note = self._load_local(path, settings, progress, fallback, model_settings)
        if isinstance(loaded.engine, LocalEngine) and loaded.engine.engine.model is not None:
            self.placement = loaded.engine.engine.model.placement
            if self.placement.first_gpu_layers is not None:  # the weights were retried
                note = f"{note} {self.placement.plan.describe()}".strip()
            elif note:
                note = f"{note} {self.placement.plan.describe()}."
        if note:
            return Loaded(loaded.engine, f"{loaded.warning} {note}" if loaded.warning else note)
        return loaded

    def _load_local(
        self,
        path: str,
        settings: ContextSettings,
        progress: Progress,
        fallback: bool,
        model_settings: ModelSettings | None,
    ) -> tuple[Loaded, str]:
        """The load, and a sentence when its context did not fit the offload devices (the
        K/V cache of an offloaded layer lives on its device): then the model is loaded
        again with the planner's next smaller plan, as for weights that do not fit
        (:meth:`~app.engine.offload.Placement.fewer`), down to no offloaded layer."""
        current, first, note = model_settings, 0, ""
        while True:
            try:
                loaded = super().load(path, settings, progress, fallback, model_settings=current)
                return loaded, note
            except ContextError as exc:
                smaller = _fewer_for_context(path, current, str(exc))
                if current is None or smaller is None:
                    raise
                n, fewer, where = smaller
                first = first or n
                current = dataclasses.replace(current, gpu_layers=str(fewer))
                note = (
                    f"{where} could not allocate the context for {first} offloaded layers, so "
                    f"the model was loaded with {fewer} instead."
                )
                log.warning("%s", note)

    def _load_private(
        self,
        path: str,
        settings: ContextSettings,
        progress: Progress,
        fallback: bool,
        model_settings: ModelSettings,
    ) -> Loaded:
        progress(0.0)
        private = PrivateServer(
            path,
            settings.to_dict(),
            model_settings.to_dict(),
            settings.n_seq_max,
            on_gone=self._on_gone or (lambda text: log.warning("%s", text)),
        )
        try:
            loaded = private.loader().load("", settings, progress, fallback)
        except BaseException:
            private.close()
            raise
        self.private = private
        note = (
            f"The model runs in a separate process because it uses the remote worker "
            f"{private.endpoints}: if the worker goes away, that process ends and this one "
            "stays."
        )
        return Loaded(loaded.engine, f"{loaded.warning} {note}" if loaded.warning else note)

    def close(self) -> None:
        """End the private server of the last load, if any."""
        if self.private is not None:
            self.private.close()
            self.private = None


def _fewer_for_context(
    path: str, settings: ModelSettings | None, errors: str
) -> tuple[int, int, str] | None:
    """After a context that failed with ``errors``: the offloaded layers of that load, the
    next smaller count and the devices in words; None when it was not an allocation
    failure on an offload device, or nothing was offloaded."""
    from app.engine.metadata import read_model_info
    from app.engine.offload import place

    if settings is None:
        return None
    placement = place(read_model_info(path), settings)
    smaller = placement.fewer(errors)
    if smaller is None:
        return None
    where = ", ".join(d.label() for d in placement.devices)
    return placement.plan.n_gpu_layers, smaller.plan.n_gpu_layers, where
