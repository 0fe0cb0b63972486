"""An RPC device on loopback (``llamadesk rpc-worker``, tests/devices) running SmolLM2: part
of the layers, then all of them, on the remote device through ``run``.

One sequence, the same prompt and chunking as the CPU-only run: a fresh run of the same
shape (DESIGN.md section 7), so the greedy tokens must be equal token for token - the
worker's CPU backend runs the same kernels on the same batches (measured equal here).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.devices.conftest import ROOT, Worker, cli_env, running_worker

pytestmark = pytest.mark.timeout(300)
PROMPT = "What is the capital of France?"
FLAGS = ("--temp", "0", "-n", "16", "-c", "1024", "-t", "1")


@pytest.fixture(scope="module")
def worker() -> Iterator[Worker]:
    yield from running_worker()


def _run(model: Path, *extra: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "app", "run", str(model), PROMPT, "--json", *FLAGS, *extra],
        capture_output=True,
        text=True,
        timeout=240,
        env=cli_env(),
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    data: dict[str, Any] = json.loads(done.stdout)
    return data


@pytest.fixture(scope="module")
def cpu(smollm2: Path) -> dict[str, Any]:
    return _run(smollm2, "--gpu-layers", "none")


@pytest.mark.parametrize("layers", ["10", "all"])
def test_smollm2_on_an_rpc_device_gives_the_cpu_only_tokens(
    smollm2: Path, worker: Worker, cpu: dict[str, Any], layers: str
) -> None:
    remote = _run(smollm2, "--rpc", worker.endpoint, "--gpu-layers", layers)
    [ours], [theirs] = cpu["results"], remote["results"]
    assert theirs["tokens"] == ours["tokens"] and theirs["text"] == ours["text"]
    assert "Paris" in ours["text"]
    device = next(d for d in remote["devices"] if d["type"] == "remote")
    assert device["endpoint"] == worker.endpoint
    n_layers = len(cpu["devices"][0]["layers"])
    # as llama.cpp's -ngl: N counts the output layer, so N - 1 repeating layers go remote
    expected = n_layers if layers == "all" else int(layers) - 1
    assert len(device["layers"]) == expected and device["output_layer"]
