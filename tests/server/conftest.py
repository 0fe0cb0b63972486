"""Servers for the API tests: in-process (a ServerRunner on a free port) or ``llamadesk serve``."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx2
import openai
import pytest

from app.engine import ContextSettings
from app.server import ServerConfig, ServerRunner
from tests.support.gguf_models import TinySpec, write_tiny_model
from tests.support.serve_process import ServeProcess
from tests.support.tool_models import write_qwen25_model

N_CTX = 8192
ROOT = Path(__file__).resolve().parents[2]

MakeServer = Callable[..., ServerRunner]


def context(n_seq: int, **overrides: Any) -> ContextSettings:
    values: dict[str, Any] = {
        "n_ctx": N_CTX,
        "n_batch": 256,
        "n_ubatch": 256,
        "n_seq_max": n_seq,
        "n_threads": 1,
        "n_threads_batch": 1,
    }
    values.update(overrides)
    return ContextSettings(**values)


@pytest.fixture(scope="session")
def long_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny test model, trained (so to speak) for 8k tokens."""
    return write_tiny_model(
        tmp_path_factory.mktemp("models") / "tiny-8k.gguf", TinySpec(n_ctx_train=N_CTX)
    )


def start_server(
    model: Path,
    home: Path,
    config: ServerConfig | None = None,
    **settings: Any,
) -> ServerRunner:
    config = config or ServerConfig(port=0, parallel=8)
    config = replace(config, port=0)
    runner = ServerRunner(
        model, context(config.resident + config.parallel, **settings), config, home=home
    )
    runner.start()
    runner.start_background()
    return runner


@pytest.fixture(scope="module")
def server(long_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerRunner]:
    """One shared server: 8 at once, an 8k context, its own data folder."""
    runner = start_server(long_model, tmp_path_factory.mktemp("home"))
    yield runner
    runner.close()


@pytest.fixture
def make_server(long_model: Path, tmp_path: Path) -> Iterator[MakeServer]:
    started: list[ServerRunner] = []

    def make(
        config: ServerConfig | None = None, model: Path | None = None, **settings: Any
    ) -> ServerRunner:
        home = tmp_path / f"home{len(started)}"
        runner = start_server(model or long_model, home, config, **settings)
        started.append(runner)
        return runner

    yield make
    for runner in started:
        runner.close()


@pytest.fixture(scope="module")
def qwen_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny model with Qwen 2.5's template, for the tool-call tests."""
    return write_qwen25_model(tmp_path_factory.mktemp("tools"), N_CTX)


def openai_client(server: ServerRunner, timeout: float = 60) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=f"{server.url}/v1", api_key="unused", max_retries=0, timeout=timeout
    )


@pytest.fixture
def client(server: ServerRunner) -> openai.OpenAI:
    return openai_client(server)


@pytest.fixture
def http(server: ServerRunner) -> Iterator[httpx2.Client]:
    with httpx2.Client(base_url=server.url, timeout=60) as c:
        yield c


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Callable[..., ServeProcess]]:
    procs: list[ServeProcess] = []

    def start(*args: str, home: Path | None = None) -> ServeProcess:
        proc = ServeProcess(list(args), home or tmp_path / "serve-home")
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        if proc.proc.poll() is None:
            proc.proc.kill()
            proc.proc.wait(10)


def wait_for(test: Callable[[], bool], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if test():
            return True
        time.sleep(0.02)
    return test()
