"""A thread count of 0 says it became 1, wherever it comes from (issue 20, item 6): the
Preferences field (tests/ui/test_window_templates.py), ``run --threads 0``, ``serve
--threads 0`` and a settings.json with 0; each says one sentence (stderr, a window notice)
from the one clamp (``clamp_threads``) and uses 1."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx2

from app import paths
from app.engine.threads import clamp_threads
from tests.support.serve_process import ROOT, ServeProcess
from tests.ui.conftest import write_settings

SENTENCE = "A thread count of 0 is not possible: 1 thread is used."
assert clamp_threads(0) == (1, SENTENCE)  # the one clamp's sentence


def test_run_with_threads_0_says_it_and_uses_1(tiny_model: Path, home: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "app", "run", str(tiny_model), "hi", "-n", "2", "-t", "0"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr.count(SENTENCE) == 1  # one sentence for both counts
    assert "must be between" not in done.stderr


def test_serve_with_threads_0_says_it_and_serves(tiny_model: Path, tmp_path: Path) -> None:
    proc = ServeProcess([str(tiny_model), "-t", "0", "-c", "512"], tmp_path / "serve-home")
    try:
        props = httpx2.get(f"{proc.url}/props", timeout=30).json()
        assert props["default_generation_settings"]["n_ctx"] > 0
    finally:
        _, err = proc.stop()
    assert err.count(SENTENCE) == 1, err


def test_a_settings_file_with_0_threads_says_it_in_the_window(
    qtbot: Any, make_window: Any, tiny_model: Path
) -> None:
    write_settings(None)
    data = json.loads(paths.settings_path().read_text())
    data["context"].update(n_threads=0, n_threads_batch=0)
    data["last_model_path"] = str(tiny_model)
    paths.settings_path().write_text(json.dumps(data))
    window, _ = make_window(write=False)
    assert window.model.settings.n_threads == 1
    assert window.model.settings.n_threads_batch == 1
    assert window.message_bar.text() == SENTENCE
