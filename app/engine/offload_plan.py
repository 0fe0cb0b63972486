"""Which layer goes to which device, planned before loading and said in words.

llama.cpp's automatic fit (``common_fit_params``, its ``--fit``) is C++ in libllama-common
and not installed with the bindings, so the plan is ours, on the same rules:

- ``n_gpu_layers = N`` puts the *last* N of the ``n_layer + 1`` layers (the repeating
  layers, then the output layer) on the offload devices; the input embedding stays on the
  CPU. Which device each offloaded layer gets follows ``llm_load_tensors``'s split points
  (cumulative ``tensor_split`` proportions, else each device's free memory):
  :func:`assign_layers` is that computation, line for line, and a test checks it against
  llama.cpp's own "layer N assigned to device X" log lines.
- Auto keeps a margin of 1 GiB free on every device (as ``--fit`` does: compute buffers
  and other programs need it) and picks the most layers whose weights (from the GGUF's
  tensor sizes) plus their share of the context's memory (K/V cells, recurrent states and
  checkpoints, :mod:`app.engine.memory_estimate`, spread evenly over the layers) fit.

Pure Python over plain numbers: the devices come in as :class:`PlanDevice` values.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass
from typing import Any

from app.engine.gguf_header import GGUFHeader
from app.settings_schema import format_bytes

MARGIN_BYTES = 1 << 30  # llama.cpp's --fit leaves 1 GiB per device
CPU = "CPU"
_BLOCK = re.compile(r"blk\.(\d+)\.")


@dataclass(frozen=True)
class LayerSizes:
    """Weight bytes per repeating layer, of the output layer and of the input embedding."""

    layers: tuple[int, ...]
    output: int
    input: int

    @property
    def n_layer(self) -> int:
        return len(self.layers)

    def of(self, index: int) -> int:
        """Bytes of layer ``index`` (``n_layer`` = the output layer)."""
        return self.output if index == self.n_layer else self.layers[index]


def layer_sizes(header: GGUFHeader, n_layer: int) -> LayerSizes:
    """From the tensor infos: ``blk.N.*`` per layer, ``output*`` to the output layer (with
    tied embeddings llama.cpp duplicates ``token_embd`` there), the rest the input."""
    layers = [0] * n_layer
    output = 0
    inputs = 0
    names = {t.name for t in header.tensors}
    for t in header.tensors:
        size = t.n_bytes or 0
        match = _BLOCK.match(t.name)
        if match and int(match.group(1)) < n_layer:
            layers[int(match.group(1))] += size
        elif t.name.startswith("output"):
            output += size
        else:
            inputs += size
            if t.name == "token_embd.weight" and "output.weight" not in names:
                output += size  # tied: the output layer's copy of the embedding
    return LayerSizes(tuple(layers), output, inputs)


@dataclass(frozen=True)
class PlanDevice:
    """An offload device as the planner sees it."""

    name: str
    label: str  # "RPC0 (127.0.0.1:50052)", "CUDA0 (NVIDIA GeForce RTX 4070)"
    free_bytes: int


def assign_layers(
    n_layer: int, n_gpu_layers: int, devices: tuple[str, ...], splits: tuple[float, ...]
) -> tuple[str, ...]:
    """The device of each of the ``n_layer + 1`` layers, as ``llm_load_tensors`` does it:
    ``i_gpu_start = max(n_layer + 1 - N, 0)``, the device by ``upper_bound`` of the
    normalised cumulative split at ``(il - i_gpu_start) / act_gpu_layers``."""
    n_all = n_layer + 1
    n = n_all if n_gpu_layers < 0 else n_gpu_layers
    start = max(n_all - n, 0)
    act = 0 if not devices else min(n, n_all)
    total = sum(splits)
    cumulative: list[float] = []
    running = 0.0
    for value in splits:
        running += value
        cumulative.append(running / total if total else 0.0)
    out = []
    for il in range(n_all):
        if il < start or il - start >= act:
            out.append(CPU)
        else:
            position = bisect.bisect_right(cumulative, (il - start) / act)
            out.append(devices[min(position, len(devices) - 1)])
    return tuple(out)


@dataclass(frozen=True)
class OffloadPlan:
    """Where each layer goes and what each device holds."""

    n_layer: int
    n_gpu_layers: int  # what llama.cpp is given (n_layer + 1 = every layer and the output)
    devices: tuple[PlanDevice, ...]  # the offload devices, in llama.cpp's order
    splits: tuple[float, ...]  # proportions given to llama.cpp (() = its own default)
    assignment: tuple[str, ...]  # device name per layer; the last entry is the output layer
    device_bytes: tuple[tuple[str, int], ...]  # planned bytes per device (CPU included)
    auto: bool
    reason: str = ""  # why Auto chose what it chose, when it is not every layer

    def layers_on(self, name: str) -> int:
        """Repeating layers on ``name`` (the output layer is not counted)."""
        return sum(1 for d in self.assignment[: self.n_layer] if d == name)

    def describe(self) -> str:
        """``"22 of 28 layers on RPC0 (127.0.0.1:50052), 6 on the CPU"``."""
        parts = [
            f"{self.layers_on(d.name)} of {self.n_layer} layers on {d.label}"
            if not i
            else f"{self.layers_on(d.name)} on {d.label}"
            for i, d in enumerate(self.devices)
            if self.layers_on(d.name)
        ]
        cpu = self.layers_on(CPU)
        output = next((d.label for d in self.devices if d.name == self.assignment[-1]), "")
        if not parts:
            text = f"All {self.n_layer} layers on the CPU"
            if output:
                text += f", the output layer on {output}"
        else:
            text = ", ".join(parts) + (f", {cpu} on the CPU" if cpu else "")
            if not output:
                text += " (the output layer on the CPU)"
        return f"{text}. {self.reason}".strip() if self.reason else text

    def to_dict(self) -> dict[str, Any]:
        return {
            "n_layer": self.n_layer,
            "n_gpu_layers": self.n_gpu_layers,
            "auto": self.auto,
            "plan": self.describe(),
            "layers": list(self.assignment[: self.n_layer]),
            "output_layer": self.assignment[-1],
            "device_bytes": dict(self.device_bytes),
        }


def _bytes_per_device(
    assignment: tuple[str, ...], sizes: LayerSizes, context_per_layer: int
) -> dict[str, int]:
    out: dict[str, int] = {CPU: sizes.input}
    for il, name in enumerate(assignment):
        extra = context_per_layer if il < sizes.n_layer else 0
        out[name] = out.get(name, 0) + sizes.of(il) + extra
    return out


def plan(
    sizes: LayerSizes,
    context_bytes: int,
    devices: tuple[PlanDevice, ...],
    gpu_layers: int | None,
    tensor_split: tuple[float, ...] = (),
    margin: int = MARGIN_BYTES,
) -> OffloadPlan:
    """The plan for ``gpu_layers`` (``None`` = auto, ``-1`` = all, else a count) over
    ``devices``. ``context_bytes``: the context's memory besides the weights."""
    n_layer = sizes.n_layer
    n_all = n_layer + 1
    per_layer_ctx = context_bytes // max(1, n_layer)
    names = tuple(d.name for d in devices)
    if tensor_split and len(tensor_split) < len(devices):
        tensor_split = tensor_split + (0.0,) * (len(devices) - len(tensor_split))
    tensor_split = tensor_split[: len(devices)]

    def layout(n: int, splits: tuple[float, ...]) -> tuple[tuple[str, ...], dict[str, int]]:
        assignment = assign_layers(n_layer, n, names, splits)
        return assignment, _bytes_per_device(assignment, sizes, per_layer_ctx)

    if gpu_layers is not None or not devices:
        n = 0 if not devices else (n_all if gpu_layers is None or gpu_layers < 0 else gpu_layers)
        n = min(n, n_all)
        # Without a split llama.cpp divides by free memory: the same numbers here.
        splits = tensor_split or tuple(float(d.free_bytes) for d in devices)
        assignment, used = layout(n, splits)
        return OffloadPlan(
            n_layer, n, devices, tensor_split, assignment, tuple(used.items()), False
        )
    budgets = tuple(max(0, d.free_bytes - margin) for d in devices)
    splits = tensor_split or tuple(float(b) for b in budgets)
    if not any(splits):
        assignment, used = layout(0, tuple(1.0 for _ in devices))
        reason = f"No device has more than {format_bytes(margin)} free, so nothing is offloaded."
        return OffloadPlan(n_layer, 0, devices, (), assignment, tuple(used.items()), True, reason)
    for n in range(n_all, -1, -1):
        assignment, used = layout(n, splits)
        if all(used.get(d.name, 0) <= b for d, b in zip(devices, budgets, strict=True)):
            reason = (
                ""
                if n == n_all
                else f"Auto keeps {format_bytes(margin)} free on each device; more layers do not fit."
            )
            return OffloadPlan(
                n_layer, n, devices, splits, assignment, tuple(used.items()), True, reason
            )
    raise AssertionError("n = 0 always fits")  # pragma: no cover (0 layers use no device)
