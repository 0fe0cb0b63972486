"""Defaults that depend on this machine: thread counts from its cores."""

from __future__ import annotations

import os


def default_threads() -> int:
    """Threads for generation: all cores but one, for the window to stay responsive.

    Generation is memory bound, so the last core adds little; llama.cpp's threads spin
    while they wait, and a window sharing every core with them stutters.
    """
    count = os.cpu_count() or 1
    return max(1, min(8, count - 1))


def default_batch_threads() -> int:
    """Threads for prompt processing (compute bound): every core."""
    return max(1, min(16, os.cpu_count() or 1))


def clamp_threads(value: int) -> tuple[int, str | None]:
    """A thread count of at least 1, and the sentence saying so when it was raised: the
    one clamp (and sentence) of a thread count, wherever it comes from (Preferences,
    ``settings.json``, ``--threads``; :func:`app.engine.threads.clamp_threads`)."""
    if value >= 1:
        return value, None
    return 1, f"A thread count of {value} is not possible: 1 thread is used."
