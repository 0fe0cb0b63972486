"""llama.cpp's own ``ggml-rpc-server`` (built from the vendored sources by ``python -m
tests.support.peers``, which the README's test command runs first) as the app's remote
device: the probe speaks its protocol, ``llamadesk devices`` lists it, and a model with
every layer on it gives the CPU's greedy tokens. The app's own worker is tested the same
way in tests/devices/test_rpc_run.py; this is the peer users run on their GPU machines.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from app.engine.rpc_probe import RpcProbeError, probe
from tests.devices.conftest import ROOT, Worker, cli_env, free_port
from tests.support import peers
from tests.support.arch_models import write_arch_model

pytestmark = pytest.mark.timeout(300)
PROMPT = "hello there, how are you"


@pytest.fixture(scope="module")
def peer(need_rpc: None) -> Iterator[Worker]:
    if not peers.RPC_SERVER.exists():
        pytest.fail(
            f"ggml-rpc-server is not built ({peers.RPC_SERVER}): "
            "python -m tests.support.peers builds it"
        )
    port = free_port()
    process = subprocess.Popen(
        [str(peers.RPC_SERVER), "-H", "127.0.0.1", "-p", str(port), "-t", "1"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    endpoint = f"127.0.0.1:{port}"
    worker = Worker(process, endpoint)
    deadline = time.monotonic() + 90
    while True:
        try:
            probe(endpoint, timeout_s=5)
            break
        except RpcProbeError:
            if process.poll() is not None or time.monotonic() > deadline:
                worker.stop()
                raise AssertionError(f"ggml-rpc-server on {endpoint} did not start") from None
            time.sleep(0.2)
    yield worker
    worker.stop()


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_arch_model(tmp_path_factory.mktemp("peer-model") / "llama.gguf", "llama")


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "app", *args],
        capture_output=True,
        text=True,
        timeout=240,
        env=cli_env(),
        cwd=ROOT,
    )


def _run_json(model: Path, *extra: str) -> dict[str, Any]:
    done = _cli("run", str(model), PROMPT, "--raw", "--json", "-n", "16", "--temp", "0", *extra)
    assert done.returncode == 0, done.stderr
    data: dict[str, Any] = json.loads(done.stdout)
    return data


def test_the_probe_speaks_the_peers_protocol(peer: Worker) -> None:
    info = probe(peer.endpoint, timeout_s=10)
    assert info.devices, "the peer offers its CPU at least"
    assert all(0 < d.free_bytes <= d.total_bytes for d in info.devices)


def test_devices_lists_the_peer(peer: Worker) -> None:
    done = _cli("devices", "--rpc", peer.endpoint, "--json")
    assert done.returncode == 0, done.stderr
    remote = [d for d in json.loads(done.stdout)["devices"] if d["type"] == "remote"]
    assert remote and remote[0]["endpoint"] == peer.endpoint


def test_every_layer_on_the_peer_gives_the_cpu_tokens(model: Path, peer: Worker) -> None:
    cpu = _run_json(model, "--gpu-layers", "none")
    remote = _run_json(model, "--rpc", peer.endpoint, "--gpu-layers", "all")
    assert len(cpu["results"][0]["tokens"]) == 16
    assert remote["results"][0]["tokens"] == cpu["results"][0]["tokens"]
    device = next(d for d in remote["devices"] if d["type"] == "remote")
    assert device["endpoint"] == peer.endpoint and device["output_layer"]
