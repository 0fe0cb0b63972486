"""Serve this machine's devices to another LlamaDesk: ``ggml_backend_rpc_start_server``.

The server comes from the same llama-cpp-python wheel as the client, so their protocol
versions always match. It never returns: the process hosting it IS the worker, stopped by
a signal. The protocol has no authentication or encryption (llama.cpp says never to expose
it), so anything but loopback needs the caller's explicit word that the network is trusted.
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

from app.engine.devices import Device, DeviceKind, list_devices, rpc_start_server_address
from app.engine.errors import EngineError
from app.engine.rpc_probe import Endpoint
from app.fsutil import make_private_dir


def served_devices() -> tuple[Device, ...]:
    """What a worker offers, as ggml-rpc-server chooses: every local GPU, else the CPU."""
    local = [d for d in list_devices() if d.kind is not DeviceKind.REMOTE]
    gpus = tuple(d for d in local if d.kind in (DeviceKind.GPU, DeviceKind.IGPU))
    if gpus:
        return gpus
    cpu = tuple(d for d in local if d.kind is DeviceKind.CPU)
    if not cpu:
        raise EngineError("This machine has no device llama.cpp can serve.")
    return cpu


def check_bind(endpoint: Endpoint, trusted_network: bool) -> None:
    """Loopback only, unless the user says the network is trusted (a sentence why)."""
    if not endpoint.is_loopback and not trusted_network:
        raise EngineError(
            f"Refusing to listen on {endpoint.host}: the RPC protocol has no password and no "
            "encryption, so anyone who reaches the port can run code on this machine's "
            "devices and read the model. Listen on 127.0.0.1 and reach it through an SSH "
            "tunnel or WireGuard, or pass --trusted-network if every machine on that network "
            "is yours."
        )


def limit_memory(mib: int) -> None:
    """Cap the address space at what the process maps now plus ``mib`` MiB: the worker's
    buffer allocations beyond it fail, which ggml-rpc answers as an allocation failure
    (the client's load fails cleanly and is retried with fewer layers)."""
    if mib < 1:
        raise EngineError(f"The memory limit must be at least 1 MiB, not {mib}.")
    try:
        import resource

        pages = int(Path("/proc/self/statm").read_text().split()[0])
    except (ImportError, OSError, ValueError):
        raise EngineError("A worker's memory limit needs Linux (/proc and setrlimit).") from None
    now = pages * os.sysconf("SC_PAGE_SIZE")
    _soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    want = now + mib * (1 << 20)
    if hard != resource.RLIM_INFINITY:
        want = min(want, hard)
    resource.setrlimit(resource.RLIMIT_AS, (want, hard))


def serve(
    endpoint: Endpoint,
    cache_dir: Path | None = None,
    n_threads: int | None = None,
    devices: tuple[Device, ...] | None = None,
) -> None:
    """Run the RPC server in this process for ever (llama.cpp prints its banner)."""
    from app.engine.devices import device_array

    chosen = devices if devices is not None else served_devices()
    start = ctypes.CFUNCTYPE(
        None,
        ctypes.c_char_p,
        ctypes.c_char_p,
        ctypes.c_size_t,
        ctypes.c_size_t,
        ctypes.POINTER(ctypes.c_void_p),
    )(rpc_start_server_address())
    array = device_array(chosen)
    if cache_dir is not None:
        make_private_dir(cache_dir)  # what the worker caches is the models' tensors
    threads = n_threads if n_threads is not None else max(1, (os.cpu_count() or 2) // 2)
    # Returns only when it could not start (a port in use): it prints why on stderr.
    start(
        str(endpoint).encode(),
        str(cache_dir).encode() if cache_dir is not None else None,
        threads,
        len(chosen),
        ctypes.cast(array, ctypes.POINTER(ctypes.c_void_p)),
    )
    raise EngineError(
        f"The RPC worker could not listen on {endpoint} (is the port already in use?)."
    )
