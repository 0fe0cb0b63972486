"""The plan shown before loading: where a model's layers would go, without loading it.

For the model manager, Discover, ``llamadesk models`` and the Devices settings. Local
devices come from ggml's registry; remote workers are asked in pure Python
(:func:`~app.engine.rpc_probe.probe`, with a timeout), never registered with llama.cpp
here: its RPC client aborts the process when a worker goes away, and the window must not
hold a connection to one.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from app.engine import devices as dev
from app.engine.metadata import ModelInfo, read_model_header
from app.engine.offload import context_bytes
from app.engine.offload_plan import LayerSizes, OffloadPlan, PlanDevice, layer_sizes, plan
from app.engine.rpc_probe import RpcProbeError, RpcServerInfo, parse_endpoints, probe
from app.engine.settings import ContextSettings, ModelSettings
from app.settings_schema.device_fields import (
    SPLIT_MODES,
    parse_gpu_layers,
    parse_tensor_split,
    split_names,
)

PROBE_TIMEOUT_S = 3.0


@dataclass(frozen=True)
class PlanPreview:
    plan: OffloadPlan
    text: str  # "22 of 28 layers on CUDA0 (RTX 4070), 6 on the CPU; 4 tabs of 8k"
    problems: tuple[str, ...] = ()  # endpoints that did not answer, said in sentences


def tabs_text(context: ContextSettings) -> str:
    """``"4 tabs of 8k"``: the resident tabs and each one's share of the context."""
    tabs = max(1, int(context.n_seq_max))
    n_ctx = int(context.n_ctx) if isinstance(context.n_ctx, int) and context.n_ctx > 0 else 0
    if not n_ctx:
        return f"{tabs} tab{'s' if tabs != 1 else ''} of the model's training context"
    each = n_ctx // tabs
    size = f"{each // 1024}k" if each >= 1024 and each % 1024 == 0 else f"{each:,}"
    return f"{tabs} tab{'s' if tabs != 1 else ''} of {size}"


def remote_devices(
    endpoints: str, timeout_s: float = PROBE_TIMEOUT_S
) -> tuple[tuple[PlanDevice, ...], tuple[str, ...]]:
    """The remote workers' devices as the planner sees them (named RPC0, RPC1... in order,
    as llama.cpp names them), and a sentence for each endpoint that did not answer."""
    found: list[PlanDevice] = []
    problems: list[str] = []
    for endpoint in parse_endpoints(endpoints):
        try:
            info: RpcServerInfo = probe(endpoint, timeout_s=timeout_s)
        except RpcProbeError as exc:
            problems.append(str(exc))
            continue
        for memory in info.devices:
            name = f"RPC{len(found)}"
            found.append(PlanDevice(name, f"{name} ({endpoint})", memory.free_bytes))
    return tuple(found), tuple(problems)


def local_devices(names: tuple[str, ...] = ()) -> tuple[PlanDevice, ...]:
    """This machine's GPUs (those named, else all) as the planner sees them."""
    listed = [
        d for d in dev.list_devices() if d.kind.offloads and d.kind is not dev.DeviceKind.REMOTE
    ]
    if names:
        wanted = {n.lower() for n in names}
        listed = [d for d in listed if d.name.lower() in wanted]
    return tuple(PlanDevice(d.name, d.label(), d.free_bytes) for d in listed)


def preview(
    path: str | Path,
    settings: ModelSettings | None = None,
    context: ContextSettings | None = None,
    remote: tuple[PlanDevice, ...] | None = None,
) -> PlanPreview:
    """The plan for ``path`` with these device choices (``remote``: already probed
    workers; None probes ``settings.rpc_servers`` now, which may take a few seconds)."""
    settings = settings or ModelSettings()
    context = context or ContextSettings()
    info, header = read_model_header(Path(path))
    problems: tuple[str, ...] = ()
    if remote is None:
        remote, problems = remote_devices(settings.rpc_servers)
    names = tuple(n for n in split_names(settings.devices) if not n.upper().startswith("RPC"))
    # llama.cpp orders remote devices first (app.engine.devices.resolve).
    chosen = (*remote, *local_devices(names))
    gpu_layers = parse_gpu_layers(settings.gpu_layers)
    split_mode = SPLIT_MODES[settings.split_mode]
    planned = chosen if split_mode else chosen[settings.main_device : settings.main_device + 1]
    the_plan = plan(
        layer_sizes(header, info.n_layer),
        context_bytes(info, context),
        planned,
        gpu_layers if planned else 0,
        parse_tensor_split(settings.tensor_split) if split_mode else (),
    )
    return PlanPreview(the_plan, f"{the_plan.describe()}; {tabs_text(context)}", problems)


def preview_by_size(
    size: int,
    info: ModelInfo,
    settings: ModelSettings | None = None,
    context: ContextSettings | None = None,
    remote: tuple[PlanDevice, ...] = (),
) -> PlanPreview:
    """The plan of a file not yet downloaded (Discover): its header's layer count and the
    file's size spread evenly over the layers and the output layer (no tensor table)."""
    settings = settings or ModelSettings()
    context = context or ContextSettings()
    n_layer = max(1, info.n_layer)
    share = size // (n_layer + 1)
    sizes = LayerSizes((share,) * n_layer, share, 0)
    names = tuple(n for n in split_names(settings.devices) if not n.upper().startswith("RPC"))
    chosen = (*remote, *local_devices(names))
    split_mode = SPLIT_MODES[settings.split_mode]
    planned = chosen if split_mode else chosen[settings.main_device : settings.main_device + 1]
    the_plan = plan(
        sizes,
        context_bytes(info, context),
        planned,
        parse_gpu_layers(settings.gpu_layers) if planned else 0,
        parse_tensor_split(settings.tensor_split) if split_mode else (),
    )
    return PlanPreview(the_plan, f"{the_plan.describe()}; {tabs_text(context)}")
