"""CPU threads that cannot collapse (issue 20, item 2).

llama-cpp-python's wheels build ggml with OpenMP: after every operation of a decode the
worker threads meet at an ``omp barrier``, where libgomp spins (``GOMP_SPINCOUNT``, by
default 300,000 rounds) before it sleeps. When another process keeps a core busy, a worker
the kernel took off its core stalls every other worker spinning at the next barrier: with
threads = cores, speed fell from 70 to about 1 token/s (issue 20). ggml's own threadpool
setting for this (``ggml_threadpool_params.poll``) is not used in an OpenMP build.

:func:`configure_openmp` therefore sets libgomp's spin count before llama.cpp is loaded
(libgomp reads it once, when it loads), unless the user set ``OMP_WAIT_POLICY`` or
``GOMP_SPINCOUNT`` themselves: a short spin keeps the quiet speed (a barrier that is met
soon is still met spinning) and a late worker costs a sleep, not a spin of the whole
quantum. ``benchmarks/bench_cpu.py`` measures the settings. :func:`thread_warnings` says,
before a context is made, when a thread count oversubscribes the machine.

llama.cpp decodes every batch of more than one token with ``n_threads_batch`` (the prompt
threads, all cores by default), so several tabs generating in one batch would run on
every core, the count that collapses under a busy neighbour, whatever the generation
threads say. :func:`decode_threads` keeps the prompt threads for batches that hold a
prompt chunk and gives batches of generated tokens alone the generation threads.
"""

from __future__ import annotations

import os
from typing import Final

# the one clamp of a thread count and its sentence (settings files, flags, Preferences)
from app.settings_schema.machine_defaults import clamp_threads as clamp_threads

#: libgomp's spin rounds at a barrier before sleeping (its default: 300,000).
APP_SPINCOUNT: Final = 1_000
# Set to "0" to leave libgomp's defaults alone (the benchmark's bare loop does).
_OPT_OUT: Final = "LLAMADESK_OMP_DEFAULTS"


def configure_openmp() -> None:
    """Set the spin count for libgomp; call before ``llama_cpp`` is imported."""
    if os.environ.get(_OPT_OUT) == "0":
        return
    if "OMP_WAIT_POLICY" in os.environ or "GOMP_SPINCOUNT" in os.environ:
        return  # the user's own choice wins
    os.environ["GOMP_SPINCOUNT"] = str(APP_SPINCOUNT)


def decode_threads(n_threads: int, n_threads_batch: int, prompt: bool) -> tuple[int, int]:
    """``llama_set_n_threads``'s two counts for a batch with (``prompt``) or without a
    prompt chunk: generated tokens alone take the generation threads, even several tabs'."""
    return (n_threads, n_threads_batch if prompt else n_threads)


def machine_cores() -> int:
    """The cores this process may run on (its affinity), else the machine's."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def thread_warnings(n_threads: int, n_threads_batch: int, cores: int | None = None) -> list[str]:
    """Sentences to show before these thread counts are used (empty: nothing to say)."""
    cores = cores or machine_cores()
    notes: list[str] = []
    plural = "s" if cores != 1 else ""
    if cores > 1 and n_threads >= cores:
        notes.append(
            f"{n_threads} generation threads on a machine with {cores} core{plural}: when any "
            "other program (or the window) needs a core, every thread waits for the one "
            "that was set aside, and replies can slow from tens of tokens a second to one. "
            f"{cores - 1} (all cores but one) is safer."
        )
    if n_threads_batch > cores:
        notes.append(
            f"{n_threads_batch} prompt threads is more than this machine's {cores} "
            f"core{plural}: the extra threads only wait for a core. Use at most {cores}."
        )
    return notes
