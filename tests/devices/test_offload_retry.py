"""A load that a device cannot allocate is retried with fewer GPU layers and says so: a
real ``llamadesk rpc-worker`` on loopback whose memory is capped (``--memory-limit``)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from app.engine.offload import allocation_failed
from tests.devices.conftest import ROOT, Worker, cli_env
from tests.support.gguf_models import TinySpec, write_tiny_model

# ~13 MiB per layer (f32 weights: the feed-forward's three 512 x 2048 matrices and the
# attention's), so the layers' sizes dwarf everything else the worker allocates.
SPEC = TinySpec(n_embd=512, n_head=8, n_head_kv=4, n_layer=4, n_ff=2048, n_ctx_train=16384)


@pytest.fixture(scope="module")
def big_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_model(tmp_path_factory.mktemp("retry") / "tiny-512.gguf", SPEC)


def _run(model: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    flags = ("--raw", "--json", "-n", "8", "--temp", "0", "--ctx", "256", *extra)
    return subprocess.run(
        [sys.executable, "-m", "app", "run", str(model), "hello", *flags],
        capture_output=True,
        text=True,
        timeout=300,
        env=cli_env(),
        cwd=ROOT,
    )


def test_allocation_failures_are_told_from_other_failures() -> None:
    assert allocation_failed(
        "llama_model_load: error loading model: unable to allocate RPC0 buffer"
    )
    assert not allocation_failed("llama_model_load: error loading model: tensor data is not within")


def test_a_load_the_worker_cannot_hold_is_retried_with_fewer_layers(
    big_model: Path, make_worker: Callable[..., Worker]
) -> None:
    cpu = _run(big_model, "--gpu-layers", "none")
    assert cpu.returncode == 0, cpu.stderr
    worker = make_worker("--memory-limit", "36")  # room for two of the four layers
    done = _run(big_model, "--rpc", worker.endpoint, "--gpu-layers", "all")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["results"][0]["tokens"] == json.loads(cpu.stdout)["results"][0]["tokens"]
    remote = next(d for d in data["devices"] if d["type"] == "remote")
    assert 0 < len(remote["layers"]) < 4
    sentence = "could not allocate the memory for 5 offloaded layers, so the model was loaded with"
    assert sentence in data["plan"]
    assert sentence in done.stderr and "warning" in done.stderr
    assert worker.process.poll() is None  # the worker is still serving


def test_a_context_the_worker_cannot_hold_is_retried_with_fewer_layers(
    big_model: Path, make_worker: Callable[..., Worker]
) -> None:
    """Two layers' weights fit the worker, but not with their K/V cache."""
    cpu = _run(big_model, "--gpu-layers", "none", "--ctx", "8192")
    assert cpu.returncode == 0, cpu.stderr
    worker = make_worker("--memory-limit", "36")
    done = _run(big_model, "--rpc", worker.endpoint, "--gpu-layers", "3", "--ctx", "8192")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["results"][0]["tokens"] == json.loads(cpu.stdout)["results"][0]["tokens"]
    remote = next(d for d in data["devices"] if d["type"] == "remote")
    assert len(remote["layers"]) < 2  # of the three asked for (2 + the output layer)
    sentence = "could not allocate the context for 3 offloaded layers, so the model was loaded"
    assert sentence in done.stderr, done.stderr
    assert worker.process.poll() is None
