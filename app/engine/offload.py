"""A model's placement: the devices, the plan and the ``llama_model_params`` fields they set.

:class:`~app.engine.model.Model` calls :func:`place` before loading and keeps the returned
:class:`Placement` for the model's life: ``params.devices`` and ``params.tensor_split``
point into ctypes arrays it owns, which llama.cpp reads during the load.
"""

from __future__ import annotations

import ctypes
import dataclasses
from collections.abc import Callable
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
    # The plan for a given number of GPU layers (and the sentence that says why), on the
    # same devices: what :meth:`fewer` retries with.
    _replan: Callable[[int, str], Placement] | None = dataclasses.field(
        default=None, compare=False, repr=False
    )
    first_gpu_layers: int | None = None  # what the first plan asked for, before retries

    def fewer(self, errors: str) -> Placement | None:
        """After a load that failed with llama.cpp's ``errors``: the planner's next smaller
        plan when a device could not allocate its buffer (None: another failure, or
        nothing is offloaded already). Each retry takes an eighth of the layers off."""
        n = self.plan.n_gpu_layers
        if n <= 0 or self._replan is None or not allocation_failed(errors):
            return None
        first = self.first_gpu_layers if self.first_gpu_layers is not None else n
        smaller = max(0, n - max(1, (self.plan.n_layer + 1) // 8))
        where = ", ".join(d.label() for d in self.devices)
        note = (
            f"{where} could not allocate the memory for {first} offloaded layers, so the "
            f"model was loaded with {smaller} instead."
        )
        return dataclasses.replace(self._replan(smaller, note), first_gpu_layers=first)

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


def allocation_failed(errors: str) -> bool:
    """Whether llama.cpp's load errors say a device's buffer could not be allocated
    (``llama_model_load``: "unable to allocate CUDA0 buffer")."""
    text = errors.lower()
    return "unable to allocate" in text or "failed to allocate" in text


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
    ctx_bytes = context_bytes(info, context)
    plan_devices = tuple(PlanDevice(d.name, d.label(), d.free_bytes) for d in planned)
    device_array = dev.device_array(chosen)

    def make(layers: int | None, note: str = "") -> Placement:
        the_plan = plan(sizes, ctx_bytes, plan_devices, layers, split if split_mode else ())
        if note:
            the_plan = dataclasses.replace(the_plan, reason=note)
        split_array = None
        if the_plan.splits and split_mode:
            values = list(the_plan.splits) + [0.0] * (16 - len(the_plan.splits))
            split_array = (ctypes.c_float * 16)(*values[:16])
        return Placement(
            chosen, the_plan, split_mode, main, device_array, split_array, _replan=make
        )

    return make(gpu_layers if chosen else 0)
