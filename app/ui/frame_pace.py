"""How often streamed text is painted: on the screen's frames, at a readable pace.

A flush (new text into the streaming message) costs the window a layout and a paint of
the message's live label, so its rate is what the window's main thread costs while a tab
streams (issue 20 item 3). Painting faster than the screen shows frames is waste, and
faster than a reader takes in words is too: at 70 tokens a second, 15 paints a second add
four or five tokens (about a word) each, which still reads as a steady flow. The flush
interval is therefore a whole number of the screen's frames (``QScreen.refreshRate``; the
offscreen platform says 60 Hz), the fewest frames that are at least
:data:`READ_INTERVAL_MS` long. A flush only paints a tab whose reply got new text since
the last one.

Measured with benchmarks/bench_window.py (demo model, 85-125 tok/s, load 2-4), the main
thread's share of a core: every frame (60 Hz) 16%, 30 Hz 13-15%, 20 Hz 10-12%, 15 Hz
7.6-8.7% (the issue's goal: at most 8%).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

READ_INTERVAL_MS = 1000.0 / 15  # streamed text is painted at most 15 times a second
DEFAULT_REFRESH_HZ = 60.0  # a screen that says no rate (0, or a nonsense value)


@dataclass(frozen=True)
class FramePace:
    """The flush interval for a screen of ``refresh_hz``: ``frames`` frames of it."""

    refresh_hz: float
    frames: int

    @classmethod
    def for_screen(cls, refresh_hz: float, read_interval_ms: float = READ_INTERVAL_MS) -> FramePace:
        hz = refresh_hz if 1.0 <= refresh_hz <= 1000.0 else DEFAULT_REFRESH_HZ
        frame_ms = 1000.0 / hz
        # a small tolerance: 4 frames of 60 Hz are the interval, not "just under" it
        frames = max(1, math.ceil(read_interval_ms / frame_ms - 1e-6))
        return cls(hz, frames)

    @property
    def interval_ms(self) -> int:
        """The timer's interval, rounded to whole milliseconds (Qt's timers count those)."""
        return max(1, round(self.frames * 1000.0 / self.refresh_hz))
