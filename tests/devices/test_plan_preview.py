"""The plan shown before loading (``llamadesk models``, the window): per device, with the
tabs, from the GGUF and the devices' memory, remote workers asked in pure Python."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from app.engine import ContextSettings, ModelSettings
from app.engine.offload_plan import PlanDevice
from app.engine.offload_preview import preview, remote_devices, tabs_text
from tests.devices.conftest import ROOT, Worker, cli_env, free_port
from tests.support.arch_models import write_arch_model


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_arch_model(tmp_path_factory.mktemp("preview") / "llama.gguf", "llama")


def test_tabs_text() -> None:
    assert tabs_text(ContextSettings(n_ctx=32768, n_seq_max=4)) == "4 tabs of 8k"
    assert tabs_text(ContextSettings(n_ctx=1000, n_seq_max=1)) == "1 tab of 1,000"


def test_a_preview_on_a_given_device_says_each_device(model: Path) -> None:
    gpu = (PlanDevice("RPC0", "RPC0 (10.0.0.2:50052)", 8 << 30),)
    shown = preview(
        model, ModelSettings(gpu_layers="1"), ContextSettings(n_ctx=8192, n_seq_max=2), gpu
    )
    assert shown.text == (
        "All 2 layers on the CPU, the output layer on RPC0 (10.0.0.2:50052); 2 tabs of 4k"
    )
    both = preview(model, ModelSettings(gpu_layers="2"), ContextSettings(n_seq_max=1), gpu)
    assert both.text.startswith("1 of 2 layers on RPC0 (10.0.0.2:50052), 1 on the CPU; 1 tab")


def test_a_dead_endpoint_is_a_sentence_not_a_device(need_rpc: None) -> None:
    found, problems = remote_devices(f"127.0.0.1:{free_port()}", timeout_s=2)
    assert found == () and len(problems) == 1 and "127.0.0.1" in problems[0]


def test_models_shows_the_plan_with_a_worker(model: Path, worker: Worker, tmp_path: Path) -> None:
    library = tmp_path / "home" / "models"
    library.mkdir(parents=True)
    (library / "llama.gguf").write_bytes(model.read_bytes())
    env = {**cli_env(), "LLAMADESK_HOME": str(tmp_path / "home")}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "app",
            "models",
            "--json",
            "--rpc",
            worker.endpoint,
            "--gpu-layers",
            "2",
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    (row,) = json.loads(done.stdout)["models"]
    assert row["plan"].startswith(f"1 of 2 layers on RPC0 ({worker.endpoint}), 1 on the CPU; ")
    text = subprocess.run(
        [sys.executable, "-m", "app", "models"],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=120,
    )
    assert "All 2 layers on the CPU" in text.stdout, text.stderr
