"""Every device llama.cpp can use, from ggml's device registry, and the backends of this build.

llama-cpp-python 0.3.36 binds none of ``ggml_backend_dev_*`` / ``ggml_backend_reg_*``, but
they resolve through its loaded ``libllama`` (whose dependencies are ``libggml*``) with
ctypes. ``llama_supports_gpu_offload()`` is not "has a GPU": it is true whenever the RPC
backend is built in, with no GPU at all; the registry is what says which devices exist.

Remote (RPC) devices join the registry through :func:`add_rpc_server`, which probes the
endpoint in pure Python first (:mod:`app.engine.rpc_probe`): llama.cpp's RPC client aborts
the process on a connection error.
"""

from __future__ import annotations

import ctypes
import enum
import threading
from dataclasses import dataclass
from typing import Any

from app.engine.errors import EngineError
from app.engine.rpc_probe import DEFAULT_TIMEOUT_S, Endpoint, parse_endpoint, probe


class DeviceKind(enum.Enum):
    CPU = "cpu"
    GPU = "gpu"
    IGPU = "integrated gpu"
    ACCEL = "accelerator"
    META = "meta"  # llama.cpp's tensor-parallel device made of others
    REMOTE = "remote"  # an RPC device: another machine's (or process's) device

    @property
    def offloads(self) -> bool:
        """Whether layers can be offloaded to it (what ``n_gpu_layers`` counts)."""
        return self in (DeviceKind.GPU, DeviceKind.IGPU, DeviceKind.REMOTE)


# ggml-backend.h: enum ggml_backend_dev_type (RPC devices say GPU: see _device)
_DEV_TYPES = {
    0: DeviceKind.CPU,
    1: DeviceKind.GPU,
    2: DeviceKind.IGPU,
    3: DeviceKind.ACCEL,
    4: DeviceKind.META,
}


@dataclass(frozen=True)
class Device:
    """One device of ggml's registry."""

    index: int  # position in ggml's registry
    name: str  # "CPU", "CUDA0", "Vulkan0", "RPC0"...
    description: str  # the model name; for RPC devices their endpoint
    kind: DeviceKind
    backend: str  # the registry (backend) it belongs to: "CPU", "CUDA", "RPC"...
    free_bytes: int
    total_bytes: int
    endpoint: str | None = None  # for remote devices

    def label(self) -> str:
        """``"RPC0 (127.0.0.1:50052)"``, ``"CUDA0 (NVIDIA GeForce RTX 4070)"``."""
        where = self.endpoint or self.description
        return f"{self.name} ({where})" if where and where != self.name else self.name

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "name": self.name,
            "description": self.description,
            "type": self.kind.value,
            "backend": self.backend,
            "free_bytes": self.free_bytes,
            "total_bytes": self.total_bytes,
            "endpoint": self.endpoint,
        }


@dataclass(frozen=True)
class BackendBuild:
    """A GPU or remote backend llama.cpp can be built with, and how to get it."""

    name: str  # lower-case registry name: "cuda", "vulkan", "metal", "hip", "rpc"...
    label: str
    cmake_flag: str  # "" = on by default where it applies (Metal on macOS)
    note: str


# What a build may have beyond the CPU, and the CMAKE_ARGS that add it (README: Install).
BACKEND_BUILDS: tuple[BackendBuild, ...] = (
    BackendBuild("rpc", "RPC (other machines)", "-DGGML_RPC=on", "every platform"),
    BackendBuild("cuda", "CUDA (NVIDIA)", "-DGGML_CUDA=on", "needs the CUDA toolkit"),
    BackendBuild("vulkan", "Vulkan", "-DGGML_VULKAN=on", "needs the Vulkan SDK"),
    BackendBuild("metal", "Metal (Apple)", "", "on by default on macOS"),
    BackendBuild("hip", "ROCm / HIP (AMD)", "-DGGML_HIP=on", "needs ROCm"),
    BackendBuild("sycl", "SYCL (Intel)", "-DGGML_SYCL=on", "needs oneAPI"),
)


def install_command(flags: str) -> str:
    """The one-line reinstall that gives a build these ``CMAKE_ARGS``, keeping the RPC
    backend (pip's wheel cache ignores CMAKE_ARGS, hence --no-cache-dir and --no-binary)."""
    if "-DGGML_RPC=on" not in flags:
        flags = f"-DGGML_RPC=on {flags}".strip()
    return (
        f'CMAKE_ARGS="{flags}" pip install --force-reinstall --no-deps --no-cache-dir '
        "--no-binary llama-cpp-python llama-cpp-python==0.3.36"
    )


# ---------------------------------------------------------------- the C functions

_lock = threading.Lock()
_fns: Any = None
_added: dict[Endpoint, tuple[int, ...]] = {}  # endpoint -> its devices' handles
_handles: dict[int, int] = {}  # registry index -> handle (addresses stay valid)


class _Fns:
    """ggml's registry functions, typed once."""

    def __init__(self) -> None:
        from llama_cpp import llama_cpp as bindings

        from app.engine.backend import ensure_backend

        ensure_backend()
        lib = bindings._lib
        vp, sz, cp = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p
        specs: dict[str, tuple[Any, list[Any]]] = {
            "ggml_backend_dev_count": (sz, []),
            "ggml_backend_dev_get": (vp, [sz]),
            "ggml_backend_dev_name": (cp, [vp]),
            "ggml_backend_dev_description": (cp, [vp]),
            "ggml_backend_dev_type": (ctypes.c_int, [vp]),
            "ggml_backend_dev_memory": (None, [vp, ctypes.POINTER(sz), ctypes.POINTER(sz)]),
            "ggml_backend_dev_backend_reg": (vp, [vp]),
            "ggml_backend_device_register": (None, [vp]),
            "ggml_backend_reg_count": (sz, []),
            "ggml_backend_reg_get": (vp, [sz]),
            "ggml_backend_reg_name": (cp, [vp]),
            "ggml_backend_reg_by_name": (vp, [cp]),
            "ggml_backend_reg_dev_count": (sz, [vp]),
            "ggml_backend_reg_dev_get": (vp, [vp, sz]),
            "ggml_backend_reg_get_proc_address": (vp, [vp, cp]),
        }
        for name, (restype, argtypes) in specs.items():
            fn = getattr(lib, name)
            fn.restype = restype
            fn.argtypes = argtypes
            setattr(self, name, fn)


def _lib() -> Any:
    global _fns
    with _lock:
        if _fns is None:
            _fns = _Fns()
        return _fns


def _text(value: bytes | None) -> str:
    return (value or b"").decode("utf-8", errors="replace")


def _device(fns: Any, index: int, handle: int) -> Device:
    free, total = ctypes.c_size_t(0), ctypes.c_size_t(0)
    fns.ggml_backend_dev_memory(handle, ctypes.byref(free), ctypes.byref(total))
    reg = fns.ggml_backend_dev_backend_reg(handle)
    backend = _text(fns.ggml_backend_reg_name(reg)) if reg else ""
    kind = _DEV_TYPES.get(int(fns.ggml_backend_dev_type(handle)), DeviceKind.ACCEL)
    description = _text(fns.ggml_backend_dev_description(handle))
    endpoint = None
    if backend.upper().startswith("RPC"):
        kind, endpoint = DeviceKind.REMOTE, description
    return Device(
        index,
        _text(fns.ggml_backend_dev_name(handle)),
        description,
        kind,
        backend,
        int(free.value),
        int(total.value),
        endpoint,
    )


def list_devices() -> tuple[Device, ...]:
    """Every device in ggml's registry (the CPU, GPUs, added RPC devices), in its order."""
    fns = _lib()
    with _lock:
        devices = []
        for i in range(int(fns.ggml_backend_dev_count())):
            handle = int(fns.ggml_backend_dev_get(i))
            _handles[i] = handle
            devices.append(_device(fns, i, handle))
    return tuple(devices)


def backends() -> tuple[str, ...]:
    """The backends this build has, lower-case (``("cpu", "rpc")``; ``"cuda"``...)."""
    fns = _lib()
    return tuple(
        _text(fns.ggml_backend_reg_name(fns.ggml_backend_reg_get(i))).lower()
        for i in range(int(fns.ggml_backend_reg_count()))
    )


def has_rpc() -> bool:
    return "rpc" in backends()


def missing_backends() -> tuple[BackendBuild, ...]:
    have = set(backends())
    return tuple(b for b in BACKEND_BUILDS if b.name not in have)


def handle_of(device: Device) -> int:
    """The ``ggml_backend_dev_t`` of a listed device (for ``llama_model_params.devices``)."""
    with _lock:
        handle = _handles.get(device.index)
    if handle is None:
        raise EngineError(f"The device {device.name} is not in the registry (list them first).")
    return handle


def _proc(name: str) -> int:
    fns = _lib()
    reg = fns.ggml_backend_reg_by_name(b"RPC")
    if not reg:
        raise EngineError(
            "This llama-cpp-python has no RPC backend, so other machines cannot be used. "
            f"Reinstall it with: {install_command('-DGGML_RPC=on')}"
        )
    address = fns.ggml_backend_reg_get_proc_address(reg, name.encode())
    if not address:
        raise EngineError(f"This llama.cpp's RPC backend has no {name}.")
    return int(address)


def add_rpc_server(endpoint: str, timeout_s: float = DEFAULT_TIMEOUT_S) -> tuple[Device, ...]:
    """Probe ``endpoint`` (a sentence if it cannot be used), then add its devices to the
    registry (``ggml_backend_rpc_add_server`` + ``ggml_backend_device_register``, as
    llama-server's ``--rpc`` does). Adding the same endpoint again returns its devices."""
    where = parse_endpoint(endpoint)
    fns = _lib()
    add_server_address = _proc("ggml_backend_rpc_add_server")
    with _lock:
        known = _added.get(where)
    if known is None:
        probe(where, timeout_s)  # raises RpcProbeError with a sentence
        add_server = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_char_p)(add_server_address)
        with _lock:
            reg = add_server(str(where).encode())
            if not reg:
                raise EngineError(f"{where} reports no devices.")
            handles = tuple(
                int(fns.ggml_backend_reg_dev_get(reg, i))
                for i in range(int(fns.ggml_backend_reg_dev_count(reg)))
            )
            for handle in handles:
                fns.ggml_backend_device_register(handle)
            _added[where] = known = handles
    by_handle = {handle_of(d): d for d in list_devices()}
    return tuple(by_handle[h] for h in known if h in by_handle)


def rpc_start_server_address() -> int:
    """``ggml_backend_rpc_start_server`` from the RPC registry (for the worker)."""
    return _proc("ggml_backend_rpc_start_server")


def device_array(devices: tuple[Device, ...]) -> ctypes.Array[ctypes.c_void_p]:
    """A NULL-terminated ``ggml_backend_dev_t[]`` for ``llama_model_params.devices``: the
    caller keeps it referenced for as long as the model lives."""
    array = (ctypes.c_void_p * (len(devices) + 1))()
    for i, device in enumerate(devices):
        array[i] = handle_of(device)
    array[len(devices)] = None
    return array


def resolve(names: tuple[str, ...], rpc: tuple[str, ...] = ()) -> tuple[Device, ...]:
    """The offload devices named (``CUDA0``, ``RPC0``; case-insensitive) after adding the
    ``rpc`` endpoints; with no names, every GPU and remote device (RPC first, as llama.cpp
    orders them)."""
    for endpoint in rpc:
        add_rpc_server(endpoint)
    listed = list_devices()
    if names:
        by_name = {d.name.lower(): d for d in listed}
        chosen = []
        for name in names:
            device = by_name.get(name.strip().lower())
            if device is None:
                known = ", ".join(d.name for d in listed)
                raise EngineError(f"There is no device {name!r}; this machine has {known}.")
            if not device.kind.offloads:
                raise EngineError(
                    f"{device.name} is the {device.kind.value}: layers that are not offloaded "
                    "run there already, so name only GPU or remote devices."
                )
            chosen.append(device)
        return tuple(chosen)
    offload = [d for d in listed if d.kind.offloads]
    return tuple(sorted(offload, key=lambda d: d.kind is not DeviceKind.REMOTE))
