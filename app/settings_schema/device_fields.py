"""Where a model's layers go: GPU layers, split mode, main device, tensor split, devices and
remote (RPC) workers. Changing one reloads the model.

``gpu_layers`` is text because it is a choice *or* a number: ``auto`` (the most layers that
fit every device, planned by :mod:`app.engine.offload_plan`; nothing to offload without a
GPU or remote device), ``all``, ``none`` or a count. :func:`parse_gpu_layers` and
:func:`parse_tensor_split` are the one reading of those texts.
"""

from __future__ import annotations

import math

from app.settings_schema.field_spec import CliOption, FieldSpec

GPU_LAYERS_AUTO = "auto"
GPU_LAYERS_ALL = "all"
GPU_LAYERS_NONE = "none"
MAX_LAYERS = 1024
MAX_DEVICES = 16  # llama_max_devices() of the bundled llama.cpp
SPLIT_MODES = {"layer": 1, "none": 0}  # llama_split_mode: LAYER = 1, NONE = 0

_G = "Devices"


def parse_gpu_layers(value: str) -> int | None:
    """``None`` for auto, ``-1`` for all, else the count; ``ValueError`` with a sentence."""
    text = str(value).strip().lower()
    if text == GPU_LAYERS_AUTO:
        return None
    if text == GPU_LAYERS_ALL:
        return -1
    if text == GPU_LAYERS_NONE:
        return 0
    if text.isdigit() and int(text) <= MAX_LAYERS:
        return int(text)
    raise ValueError(
        f"GPU layers must be auto, all, none or a number from 0 to {MAX_LAYERS}, not {value!r}."
    )


def parse_tensor_split(value: str) -> tuple[float, ...]:
    """``"3,1"`` -> ``(3.0, 1.0)`` (proportions per offload device); ``""`` = by free memory."""
    text = str(value).strip()
    if not text:
        return ()
    parts = [p.strip() for p in text.split(",")]
    try:
        numbers = tuple(float(p) for p in parts)
    except ValueError:
        raise ValueError(
            f"The tensor split must be numbers separated by commas (e.g. 3,1), not {value!r}."
        ) from None
    if len(numbers) > MAX_DEVICES:
        raise ValueError(f"The tensor split names {len(numbers)} devices; at most {MAX_DEVICES}.")
    if any(n < 0 or not math.isfinite(n) for n in numbers) or not any(numbers):
        raise ValueError(
            f"The tensor split needs proportions of 0 or more, at least one above 0, not {value!r}."
        )
    return numbers


def split_names(value: str) -> tuple[str, ...]:
    """A comma-separated list of device names or endpoints, blanks dropped."""
    return tuple(p for p in (s.strip() for s in str(value).split(",")) if p)


DEVICE_FIELDS: dict[str, FieldSpec] = {
    s.name: s
    for s in (
        FieldSpec(
            "gpu_layers",
            "GPU layers",
            "How many layers run on the GPU or remote devices: auto (the most that fit every "
            "device with 1 GiB to spare), all, none, or a number. The last layers go first.",
            "text",
            default=GPU_LAYERS_AUTO,
            group=_G,
            cli=CliOption(("--gpu-layers", "-ngl"), "auto|all|none|N"),
        ),
        FieldSpec(
            "split_mode",
            "Split mode",
            "With several devices: spread the layers over them (layer), or put them all on "
            "the main device (none).",
            "choice",
            default="layer",
            choices=(("layer", "Spread layers over the devices"), ("none", "Main device only")),
            group=_G,
            advanced=True,
            cli=CliOption(("--split-mode",), None),
        ),
        FieldSpec(
            "main_device",
            "Main device",
            "With split mode none: the position of the device (in the device list) that "
            "holds every offloaded layer.",
            "int",
            default=0,
            minimum=0,
            maximum=MAX_DEVICES - 1,
            group=_G,
            advanced=True,
            cli=CliOption(("--main-device",), "I"),
        ),
        FieldSpec(
            "tensor_split",
            "Tensor split",
            "Proportions of the offloaded layers per device, e.g. 3,1 (empty: by free "
            "memory, or by the automatic fit).",
            "text",
            default="",
            group=_G,
            advanced=True,
            cli=CliOption(("--tensor-split",), "P,P,..."),
        ),
        FieldSpec(
            "devices",
            "Devices",
            "The GPU or remote devices to offload to, by name (CUDA0, Vulkan0, RPC0), "
            "comma-separated (empty: every GPU and remote device).",
            "text",
            default="",
            group=_G,
            advanced=True,
            cli=CliOption(("--devices",), "NAME,..."),
        ),
        FieldSpec(
            "rpc_servers",
            "Remote workers",
            "RPC workers to use as devices, HOST:PORT comma-separated "
            "(`llamadesk rpc-worker` on that machine).",
            "text",
            default="",
            group=_G,
            cli=CliOption(("--rpc",), "HOST:PORT,..."),
        ),
    )
}
