"""The event loop's stalls, as a user feels them (and waiting on it): a 2 ms precise timer on the GUI thread,
and the gaps between its firings (a gap of 40 ms is a frame drop of 40 ms).

Shared by the GUI benchmarks (ui_latency.py, bench_download_gui.py); Qt is imported when a
probe is made, after the benchmark has set up its environment.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

# The targets of the GUI benchmarks: no dropped frame for 99% of the time, no stall a
# user would call a freeze.
P99_TARGET_MS = 16.0
MAX_TARGET_MS = 50.0


def percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def gap_stats(gaps: list[float]) -> dict[str, float | int]:
    return {
        "max": round(max(gaps, default=0.0), 2),
        "p99": round(percentile(gaps, 99), 2),
        "p50": round(percentile(gaps, 50), 2),
        "over_16ms": sum(1 for g in gaps if g > P99_TARGET_MS),
        "samples": len(gaps),
    }


def gaps_pass(gaps: list[float]) -> bool:
    return bool(gaps) and percentile(gaps, 99) < P99_TARGET_MS and max(gaps) < MAX_TARGET_MS


def spin_until(cond: Callable[[], object], timeout: float) -> bool:
    """Run the Qt event loop until ``cond()`` holds or ``timeout`` seconds pass."""
    from PySide6.QtCore import QCoreApplication, QEventLoop  # noqa: TID251

    end = time.perf_counter() + timeout
    while not cond() and time.perf_counter() < end:
        QCoreApplication.processEvents(QEventLoop.ProcessEventsFlag.AllEvents, 20)
        time.sleep(0.005)
    return bool(cond())


class GapProbe:
    """``start()``, let the event loop run, ``stop()`` returns the gaps (ms) since start."""

    def __init__(self) -> None:
        from PySide6.QtCore import QElapsedTimer, Qt, QTimer  # noqa: TID251

        self._gaps: list[float] = []
        self._clock = QElapsedTimer()
        self._clock.start()
        self._last = 0
        self._timer: Any = QTimer()
        self._timer.setTimerType(Qt.TimerType.PreciseTimer)
        self._timer.setInterval(2)
        self._timer.timeout.connect(self._tick)

    def _tick(self) -> None:
        now = self._clock.nsecsElapsed()
        self._gaps.append((now - self._last) / 1e6)
        self._last = now

    def start(self) -> None:
        self._gaps = []
        self._last = self._clock.nsecsElapsed()
        self._timer.start()

    def stop(self) -> list[float]:
        self._timer.stop()
        return list(self._gaps)
