"""A short run of ``benchmarks/ui_latency.py`` keeps the benchmark working.

The benchmark drives the real window (its tabs, their branch, the worker's events) through
attributes no other code uses from outside, so a change to the window can break it without
any other test noticing (issue 28: it failed on main with an IndexError while the first
replies had not begun, and Qt printed "Signal source has been deleted" for every
conversation). It runs as the user runs it, a fresh process, for one measured second.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_ui_latency_benchmark_runs_and_measures_every_tab(tmp_path: Path) -> None:
    env = dict(os.environ)
    env["QT_QPA_PLATFORM"] = "offscreen"
    env["LLAMADESK_HOME"] = str(tmp_path / "home")
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    script = str(ROOT / "benchmarks" / "ui_latency.py")
    proc = subprocess.run(
        [sys.executable, script, "--seconds", "1", "--tabs", "2", "--threads", "1"],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    for line in ("Traceback", "Signal source has been deleted"):
        assert line not in proc.stderr, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert "error" not in result, result
    assert result["tabs"] == 2
    assert result["tabs_generating_at_end"] == 2  # both kept writing to the end
    assert result["tokens"] > 0
    assert result["event_loop_gap_ms"]["samples"] > 0
    # the shown tab's text was painted: the token-to-paint probe found its labels
    assert result["token_to_paint_ms"]["samples"] > 0
