"""An RPC device on loopback running SmolLM2 through ``run``: part of the layers, then all
of them, on the app's ``llamadesk rpc-worker`` (tests/devices starts it) and on llama.cpp's
own ``ggml-rpc-server`` (built by ``python -m tests.support.peers``).

One sequence, the same prompt and chunking as the CPU-only run: a fresh run of the same
shape (DESIGN.md section 7), so the greedy tokens must be equal token for token - the
worker's CPU backend runs the same kernels on the same batches (measured equal here).
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.devices.conftest import (
    Worker,
    free_port,
    rpc_backend_missing,
    running_worker,
    wait_answering,
)
from tests.real.conftest import run_json
from tests.support.peers import RPC_SERVER

pytestmark = pytest.mark.timeout(300)
PROMPT = "What is the capital of France? Answer in one word."
FLAGS = ("--temp", "0", "-n", "16", "-c", "1024", "-t", "1")


def start_rpc_server() -> Worker:
    """llama.cpp's ``ggml-rpc-server`` on a free port of 127.0.0.1, once it answers."""
    if not RPC_SERVER.exists():
        pytest.fail(
            f"ggml-rpc-server is not built ({RPC_SERVER}): python -m tests.support.peers builds it"
        )
    endpoint = f"127.0.0.1:{free_port()}"
    host, port = endpoint.split(":")
    process = subprocess.Popen(
        [str(RPC_SERVER), "-H", host, "-p", port, "-t", "1"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return wait_answering(process, endpoint, 30, "ggml-rpc-server")


@pytest.fixture(scope="module", params=["rpc-worker", "ggml-rpc-server"])
def worker(request: pytest.FixtureRequest) -> Iterator[Worker]:
    reason = rpc_backend_missing()  # run --rpc needs it, whichever worker serves
    if reason:
        pytest.skip(reason)
    if request.param == "rpc-worker":
        yield from running_worker()
        return
    peer = start_rpc_server()
    yield peer
    peer.stop()


def _run(model: Path, home: Path, *extra: str) -> dict[str, Any]:
    return run_json(model, home, PROMPT, *FLAGS, *extra)


@pytest.fixture(scope="module")
def cpu(smollm2: Path, cli_home: Path) -> dict[str, Any]:
    return _run(smollm2, cli_home, "--gpu-layers", "none")


@pytest.mark.parametrize("layers", ["10", "all"])
def test_smollm2_on_an_rpc_device_gives_the_cpu_only_tokens(
    smollm2: Path, cli_home: Path, worker: Worker, cpu: dict[str, Any], layers: str
) -> None:
    remote = _run(smollm2, cli_home, "--rpc", worker.endpoint, "--gpu-layers", layers)
    [ours], [theirs] = cpu["results"], remote["results"]
    assert theirs["tokens"] == ours["tokens"] and theirs["text"] == ours["text"]
    assert "Paris" in ours["text"]
    device = next(d for d in remote["devices"] if d["type"] == "remote")
    assert device["endpoint"] == worker.endpoint
    n_layers = len(cpu["devices"][0]["layers"])
    # as llama.cpp's -ngl: N counts the output layer, so N - 1 repeating layers go remote
    expected = n_layers if layers == "all" else int(layers) - 1
    assert len(device["layers"]) == expected and device["output_layer"]
