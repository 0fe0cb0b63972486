"""A model's placement: the devices, the plan and the ``llama_model_params`` fields they set.

:class:`~app.engine.model.Model` calls :func:`place` before loading and keeps the returned
:class:`Placement` for the model's life: ``params.devices`` and ``params.tensor_split``
point into ctypes arrays it owns, which llama.cpp reads during the load.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Any

from app.engine import devices as dev
from app.engine.gguf_header import read_header
from app.engine.metadata import ModelInfo
from app.engine.offload_plan import OffloadPlan, PlanDevice, layer_sizes, plan
from app.engine.settings import ContextSettings, ModelSettings
from app.settings_schema.device_fields import (
    SPLIT_MODES,
    parse_gpu_layers,
    parse_tensor_split,
    split_names,
)


@dataclass(frozen=True)
class Placement:
    devices: tuple[dev.Device, ...]  # the offload devices given to llama.cpp, in order
    plan: OffloadPlan
    split_mode: int
    main_device: int
    _device_array: Any
    _split_array: Any

    def apply(self, params: Any) -> None:
        """Set the placement fields of a ``llama_model_params``."""
        params.n_gpu_layers = self.plan.n_gpu_layers
        params.split_mode = self.split_mode
        params.main_gpu = self.main_device
        params.devices = ctypes.cast(self._device_array, ctypes.c_void_p).value
        if self._split_array is not None:
            params.tensor_split = ctypes.cast(self._split_array, ctypes.POINTER(ctypes.c_float))

    def to_dicts(self) -> list[dict[str, Any]]:
        """The top-level ``devices`` list of ``run --json``: each device and its layers."""
        out = []
        for i, name in enumerate(("CPU", *(d.name for d in self.devices))):
            device = self.devices[i - 1] if i else None
            out.append(
                {
                    "name": name,
                    "type": device.kind.value if device else "cpu",
                    "endpoint": device.endpoint if device else None,
                    "layers": [il for il, d in enumerate(self.plan.assignment[:-1]) if d == name],
                    "output_layer": self.plan.assignment[-1] == name,
                    "planned_bytes": dict(self.plan.device_bytes).get(name, 0),
                }
            )
        return out


def context_bytes(info: ModelInfo, context: ContextSettings | None) -> int:
    """What the context will take besides the weights (the default context if unknown)."""
    return (context or ContextSettings()).memory_estimate(info).total


def place(
    info: ModelInfo, settings: ModelSettings, context: ContextSettings | None = None
) -> Placement:
    """Resolve the devices (adding RPC workers, probed first), and plan the layers."""
    gpu_layers = parse_gpu_layers(settings.gpu_layers)
    split = parse_tensor_split(settings.tensor_split)
    rpc = split_names(settings.rpc_servers)
    chosen: tuple[dev.Device, ...] = ()
    if gpu_layers != 0 or rpc:
        chosen = dev.resolve(split_names(settings.devices), rpc)
    split_mode = SPLIT_MODES[settings.split_mode]
    main = settings.main_device
    if chosen and main >= len(chosen):
        from app.engine.settings import SettingsError

        raise SettingsError(
            "main_device",
            f"Main device {main} does not exist: there are {len(chosen)} offload devices "
            f"({', '.join(d.name for d in chosen)}), numbered from 0.",
        )
    planned = chosen if split_mode else chosen[main : main + 1]
    sizes = layer_sizes(read_header(info.path), info.n_layer)
    the_plan = plan(
        sizes,
        context_bytes(info, context),
        tuple(PlanDevice(d.name, d.label(), d.free_bytes) for d in planned),
        gpu_layers if chosen else 0,
        split if split_mode else (),
    )
    split_array = None
    if the_plan.splits and split_mode:
        values = list(the_plan.splits) + [0.0] * (16 - len(the_plan.splits))
        split_array = (ctypes.c_float * 16)(*values[:16])
    return Placement(chosen, the_plan, split_mode, main, dev.device_array(chosen), split_array)
