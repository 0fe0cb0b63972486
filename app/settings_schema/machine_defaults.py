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
