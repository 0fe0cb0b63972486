"""Real ``llamadesk rpc-worker`` processes on 127.0.0.1 for the device tests.

They need a llama-cpp-python built with the RPC backend (the README's install command
gives one); with another build the tests that use a worker are skipped, saying so.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from app.engine import ContextSettings, ModelSettings
from app.engine.rpc_probe import RpcProbeError, probe
from app.rpc_supervisor import PrivateServer
from tests.support.arch_models import write_arch_model

ROOT = Path(__file__).resolve().parents[2]


def rpc_backend_missing() -> str | None:
    """Why the worker tests cannot run here, or None."""
    from app.engine.devices import backends

    if "rpc" in backends():
        return None
    return (
        "this llama-cpp-python has no RPC backend (install it with the README's command, "
        'which builds it with CMAKE_ARGS="-DGGML_RPC=on")'
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Worker:
    process: subprocess.Popen[bytes]
    endpoint: str

    def stop(self) -> None:
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGCONT)
            self.process.kill()
        self.process.wait(10)


def cli_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    return env


def start_worker(*extra: str, port: int | None = None) -> Worker:
    """A ``llamadesk rpc-worker`` on ``port`` (None: a free one), once it answers."""
    port = port or free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "app", "rpc-worker", "--port", str(port), "--threads", "1", *extra],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=cli_env(),
        cwd=ROOT,
    )
    return wait_answering(process, f"127.0.0.1:{port}", 90, "the RPC worker")


def wait_answering(
    process: subprocess.Popen[bytes], endpoint: str, seconds: float, what: str
) -> Worker:
    """``process`` (an RPC worker) once ``endpoint`` answers a probe; killed when it ends
    first or takes longer than ``seconds``."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            probe(endpoint, timeout_s=5)
            return Worker(process, endpoint)
        except RpcProbeError:
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                raise RuntimeError(f"{what} on {endpoint} did not start") from None
            time.sleep(0.2)


@pytest.fixture(scope="module")
def need_rpc() -> None:
    reason = rpc_backend_missing()
    if reason:
        pytest.skip(reason)


@pytest.fixture(scope="module")
def worker(need_rpc: None) -> Iterator[Worker]:
    w = start_worker()
    yield w
    w.stop()


@pytest.fixture
def make_worker(need_rpc: None) -> Iterator[Callable[..., Worker]]:
    """Workers of one test (to kill or stop); arguments: more ``rpc-worker`` flags."""
    started: list[Worker] = []

    def make(*extra: str) -> Worker:
        started.append(start_worker(*extra))
        return started[-1]

    yield make
    for w in started:
        w.stop()


def running_worker() -> Iterator[Worker]:
    """The body of a worker fixture of any scope: skips where the build has no RPC
    backend, else one worker on loopback, stopped afterwards."""
    reason = rpc_backend_missing()
    if reason:
        pytest.skip(reason)
    w = start_worker()
    yield w
    w.stop()


@pytest.fixture(scope="module")
def private_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny llama model for the private model process tests."""
    return write_arch_model(tmp_path_factory.mktemp("private") / "llama.gguf", "llama")


def private_server(model: Path, worker: Worker, told: list[str], **options: Any) -> PrivateServer:
    """A private model process on ``worker``, all layers there; what it says when its child
    is gone goes to ``told``."""
    context = ContextSettings(n_ctx=2048, n_seq_max=1).to_dict()
    settings = ModelSettings(rpc_servers=worker.endpoint, gpu_layers="all").to_dict()
    return PrivateServer(str(model), context, settings, 1, on_gone=told.append, **options)


def wait_until(condition: Callable[[], bool], seconds: float) -> bool:
    """Whether ``condition`` held within ``seconds`` (polled every 0.2 s)."""
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True
