"""Will a model fit in this machine's memory? Weights + the engine's own context estimate
(K/V cells by architecture family, recurrent state, checkpoints) + a compute buffer,
against free RAM.

The context part is :meth:`app.engine.settings.ContextSettings.memory_estimate` on the
model's :class:`~app.engine.metadata.ModelInfo` (for a remote file, read from its first MB:
:meth:`app.hub.client.HubClient.remote_model_info`). Without a header the estimate falls
back to one from the file size alone (``basis == "size"``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from app.engine.metadata import ModelInfo
    from app.engine.settings import ContextSettings

Verdict = Literal["fits", "tight", "will not fit"]

TIGHT_FRACTION = 0.8  # above 80 % of the free memory a model is "tight"
_OVERHEAD = 256 << 20  # llama.cpp's own allocations, the app, the OS's caches it will push out
_GIB = 1 << 30


def available_memory() -> int:
    """Bytes of memory available to a new process (psutil where installed, else
    /proc/meminfo's MemAvailable, else free pages)."""
    try:
        import psutil  # type: ignore[import-untyped, unused-ignore]

        return int(psutil.virtual_memory().available)
    except Exception:
        pass
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return 0


@dataclass(frozen=True)
class FitEstimate:
    verdict: Verdict
    weights: int
    context: int  # K/V cells + recurrent state + checkpoints (0 when unknown)
    compute: int
    available: int
    n_ctx: int  # the context size the estimate is for (0 when unknown)
    basis: Literal["header", "size"]

    @property
    def needed(self) -> int:
        return self.weights + self.context + self.compute

    @property
    def sentence(self) -> str:
        need, have = self.needed / _GIB, self.available / _GIB
        ctx = f" with a {self.n_ctx}-token context" if self.n_ctx else ""
        if self.verdict == "fits":
            return f"Fits: needs about {need:.1f} GB{ctx}, {have:.1f} GB free."
        if self.verdict == "tight":
            return (
                f"Tight: needs about {need:.1f} GB{ctx} of the {have:.1f} GB free; close other "
                "programs or choose a smaller context."
            )
        return (
            f"Will not fit: needs about {need:.1f} GB{ctx}, only {have:.1f} GB free; choose a "
            "smaller quantization or model."
        )


def verdict_for(needed: int, available: int) -> Verdict:
    if available <= 0 or needed > available:
        return "will not fit"
    return "tight" if needed > TIGHT_FRACTION * available else "fits"


def compute_buffer(info: ModelInfo, settings: ContextSettings) -> int:
    """llama.cpp's compute buffer, roughly: one micro-batch of logits and activations."""
    n_ubatch = max(1, min(settings.n_ubatch, settings.n_batch))
    return _OVERHEAD + 4 * n_ubatch * (info.n_vocab + 8 * max(info.n_embd, 1))


def estimate(
    size_bytes: int,
    info: ModelInfo | None = None,
    *,
    settings: ContextSettings | None = None,
    available: int | None = None,
) -> FitEstimate:
    """The fit of a model of ``size_bytes`` (all parts) whose header is ``info``."""
    free = available_memory() if available is None else available
    if info is None:
        # No header: a context of the app's default size costs roughly a tenth of a small
        # model's weights; compute buffers a few hundred MB.
        context = max(size_bytes // 10, 128 << 20)
        compute = _OVERHEAD + (256 << 20)
        return FitEstimate(
            verdict_for(size_bytes + context + compute, free),
            size_bytes,
            context,
            compute,
            free,
            0,
            "size",
        )
    from app.engine.settings import ContextSettings

    ctx_settings = settings or ContextSettings()
    context = ctx_settings.memory_estimate(info).total
    compute = compute_buffer(info, ctx_settings)
    return FitEstimate(
        verdict_for(size_bytes + context + compute, free),
        size_bytes,
        context,
        compute,
        free,
        ctx_settings.effective_n_ctx(info),
        "header",
    )


def recommend(sizes: Sequence[int], fit: Callable[[int], FitEstimate]) -> int | None:
    """Index of the largest size whose estimate "fits" (None when none does)."""
    best: int | None = None
    for i, size in enumerate(sizes):
        if fit(i).verdict == "fits" and (best is None or size > sizes[best]):
            best = i
    return best
