"""GUI responsiveness while four tabs generate at once; prints one JSON object.

Measures, on the real window with the real engine on its worker thread:

* the GUI event loop's stalls: a 2 ms precise timer records when it actually fires; the
  gaps between firings are what a user feels (a gap of 40 ms = a frame drop of 40 ms).
  Reported: the longest gap and the 99th percentile (targets: p99 < 16 ms, max < 50 ms);
* token to paint: from the moment a token was sampled on the worker thread to the end of
  the paint event of the message label that shows it (the tab shown; tabs are switched
  every half second).

A tab whose reply ends (the demo model answers in a sentence) is asked to regenerate it at
once, so every tab keeps generating for the whole measurement without its conversation
growing.

Uses the demo model when it exists (``resources/models/llamadesk-demo.gguf``), otherwise a
tiny generated model (which generates thousands of tokens a second: a harsh test of the
GUI's token handling). ``QT_QPA_PLATFORM=offscreen`` works; so does a real display.

    python benchmarks/ui_latency.py [--seconds 8] [--model PATH] [--tabs 4]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.gap_probe import GapProbe, gap_stats, gaps_pass, percentile, spin_until  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--tabs", type=int, default=4)
    parser.add_argument("--model", type=Path, default=None)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()

    home = Path(tempfile.mkdtemp(prefix="llamadesk-bench-"))
    os.environ["LLAMADESK_HOME"] = str(home)
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

    from PySide6.QtCore import (
        QEvent,
        QEventLoop,
        QLoggingCategory,
        QObject,
        QTimer,
        Slot,
    )
    from PySide6.QtWidgets import QApplication, QLabel

    QLoggingCategory.setFilterRules("qt.text.font.db.warning=false")
    app = QApplication.instance() or QApplication([])

    from app import paths
    from app.storage import AppSettings, Database, save_settings

    model = args.model
    grammar: str | None = None
    if model is None and paths.demo_model_path().is_file():
        model = paths.demo_model_path()
        # the demo model answers in a sentence: printable text without an end keeps it
        # writing (its own words first, then whatever it makes of the rest)
        grammar = "root ::= [ -~\\n] root"
    if model is None:
        from tests.support.gguf_models import TinySpec, write_tiny_model

        model = write_tiny_model(home / "tiny.gguf", TinySpec())
        # the random model may end a reply at once: a grammar keeps it talking
        grammar = 'root ::= ("hello" | " world" | " tab" | " llama" | "\\n\\n- item") root'

    settings = AppSettings(
        last_model_path=str(model),
        context={
            "n_ctx": 8192,
            "n_seq_max": args.tabs,
            "n_threads": args.threads,
            "n_threads_batch": args.threads,
        },
    )
    save_settings(settings)

    from app.session.events import TextStreamed
    from app.ui.main_window import MainWindow

    db = Database.open()
    window = MainWindow(db)
    window.resize(1100, 720)
    window.show()
    window.start()

    if not spin_until(window.model_ready, 120):
        print(json.dumps({"error": "the model did not load", "model": str(model)}))
        return 1

    # token to paint: the window reports the sampled time of text it handed to a label;
    # the label's next paint event completes the measurement
    latencies: list[float] = []
    pending: list[float] = []

    class PaintProbe(QObject):
        def eventFilter(self, watched: QObject, event: QEvent) -> bool:
            # The message's text labels: the live tail ("content") and, while a long
            # paragraph streams, the pieces frozen before it ("chunk").
            if (
                event.type() == QEvent.Type.Paint
                and pending
                and watched.objectName()
                in (
                    "content",
                    "chunk",
                )
            ):
                # measured after the paint: filter the event, paint, then timestamp
                watched.removeEventFilter(self)
                try:
                    app.sendEvent(watched, event)
                finally:
                    watched.installEventFilter(self)
                now = time.perf_counter()
                latencies.extend(now - t for t in pending)
                pending.clear()
                return True
            return False

    probe = PaintProbe()
    probed: set[int] = set()

    def on_painted(sampled_at: float) -> None:
        tab = window.current_tab()
        widget = tab.view.last() if tab is not None else None
        if widget is None:
            return
        for label in widget.findChildren(QLabel):
            if label.objectName() in ("content", "chunk") and id(label) not in probed:
                label.installEventFilter(probe)
                probed.add(id(label))
        pending.append(sampled_at)

    window.paint_hook = on_painted

    tabs = []
    for i in range(args.tabs):
        tab = window.new_tab()
        assert tab is not None
        sampling = {**tab.conversation.sampling, "max_tokens": 100000, "temperature": 0.8}
        if grammar:
            sampling["grammar"] = grammar
        db.update_conversation_settings(tab.cid, sampling=sampling)
        tab.conversation = db.get_conversation(tab.cid)
        tab.settings.set_values(tab.conversation.system_prompt, tab.conversation.sampling)
        tab.composer.setPlainText(
            f"Tab {i + 1}: write a long story about a llama who keeps a desk tidy, "
            "with a list of the things on the desk and a short poem at the end."
        )
        tab.send()
        tabs.append(tab)

    # event loop gaps
    stalls = GapProbe()

    class Counter(QObject):
        """Tokens streamed to the GUI (every tab, every reply)."""

        def __init__(self) -> None:
            super().__init__()
            self.tokens = 0

        @Slot(object)
        def on_event(self, event: object) -> None:
            if isinstance(event, TextStreamed):
                self.tokens += event.n_tokens

    counter = Counter()
    window.worker.conversationEvent.connect(counter.on_event)
    replies = [0]

    def keep_generating() -> None:
        for tab in tabs:
            if not tab.generating and tab.branch and tab.branch[-1].role == "assistant":
                tab.regenerate(tab.branch[-1].id)
                replies[0] += 1

    refill = QTimer()
    refill.setInterval(20)
    refill.timeout.connect(keep_generating)

    # wait for every tab to stream, then measure
    refill.start()
    spin_until(
        lambda: all(t.reply_text() or (t.branch and t.branch[-1].content) for t in tabs), 120
    )
    tokens_before = counter.tokens
    replies[0] = 0
    switcher = QTimer()
    switcher.setInterval(500)
    switcher.timeout.connect(window.next_tab)
    latencies.clear()
    pending.clear()
    started = time.perf_counter()
    stalls.start()
    switcher.start()
    loop = QEventLoop()
    QTimer.singleShot(int(args.seconds * 1000), loop.quit)
    loop.exec()  # the real event loop, as app.exec() runs it
    gaps = stalls.stop()[1:]  # the first sample includes the time before the timer started
    switcher.stop()
    refill.stop()
    elapsed = time.perf_counter() - started
    tokens = counter.tokens - tokens_before
    generating = sum(1 for t in tabs if t.generating)

    window.close()
    spin_until(window.is_shut_down, 10)
    db.close()

    lat_ms = [x * 1000 for x in latencies]
    result = {
        "model": Path(str(model)).name,
        "tabs": args.tabs,
        "tabs_generating_at_end": generating,
        "replies_regenerated": replies[0],
        "seconds": round(elapsed, 2),
        "tokens": tokens,
        "tokens_per_second_total": round(tokens / elapsed, 1) if elapsed else 0.0,
        "event_loop_gap_ms": gap_stats(gaps),
        "token_to_paint_ms": {
            "p50": round(statistics.median(lat_ms), 2) if lat_ms else None,
            "p99": round(percentile(lat_ms, 99), 2) if lat_ms else None,
            "max": round(max(lat_ms), 2) if lat_ms else None,
            "samples": len(lat_ms),
        },
        "targets": {"p99_gap_ms": 16, "max_gap_ms": 50},
        "pass": gaps_pass(gaps),
        "platform": os.environ.get("QT_QPA_PLATFORM", ""),
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
