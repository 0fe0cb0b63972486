"""``serve --rpc`` and ``bench --rpc``: the device flags on every command, and a server whose
model uses a remote worker stays up when that worker goes away (the model runs in a
private server child, reached as a remote engine)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx2
import pytest

from tests.devices.conftest import ROOT, Worker, cli_env, start_worker
from tests.support.arch_models import write_arch_model
from tests.support.serve_process import ServeProcess


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_arch_model(tmp_path_factory.mktemp("serve-rpc") / "llama.gguf", "llama")


def _chat(url: str, text: str) -> httpx2.Response:
    return httpx2.post(
        f"{url}/v1/chat/completions",
        json={
            "messages": [{"role": "user", "content": text}],
            "max_tokens": 8,
            "temperature": 0,
        },
        timeout=90,
    )


@pytest.mark.parametrize("command", ["serve", "bench", "run", "inspect"])
def test_every_command_takes_the_device_flags(command: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "app", command, "--help"],
        capture_output=True,
        text=True,
        env=cli_env(),
        cwd=ROOT,
        timeout=60,
    )
    for flag in ("--gpu-layers", "--devices", "--split-mode", "--tensor-split", "--rpc"):
        assert flag in done.stdout, (command, flag)


def test_serve_rpc_answers_as_the_cpu_does_and_outlives_its_worker(
    model: Path, tmp_path: Path, make_worker: Callable[[], Worker]
) -> None:
    worker = make_worker()
    cpu = ServeProcess([str(model), "--no-persist", "--gpu-layers", "none"], tmp_path / "a")
    try:
        expected = _chat(cpu.url, "hello there").json()["choices"][0]["message"]["content"]
    finally:
        cpu.stop()
    args = [str(model), "--no-persist", "--rpc", worker.endpoint, "--gpu-layers", "2"]
    server = ServeProcess(args, tmp_path / "b")
    try:
        answer = _chat(server.url, "hello there")
        assert answer.status_code == 200, answer.text
        assert answer.json()["choices"][0]["message"]["content"] == expected
        worker.stop()  # the worker goes away: the model's process aborts, the server stays
        t0 = time.monotonic()
        failed = _chat(server.url, "hello again")
        assert failed.status_code >= 500 and "error" in failed.json()
        assert time.monotonic() - t0 < 60
        # /health says the model is gone (it said ok while every chat failed)
        health = httpx2.get(f"{server.url}/health", timeout=10)
        assert health.status_code == 503, health.text
        said = health.json()["error"]["message"]
        assert "gone" in said and worker.endpoint in said and said.endswith("."), said
        refused = _chat(server.url, "meanwhile")
        assert refused.status_code == 503 and refused.json()["error"]["message"] == said
        # the worker comes back on its port: the model is loaded again by itself
        again = start_worker(port=int(worker.endpoint.rsplit(":", 1)[1]))
        try:
            assert _wait_health(server.url, 200, 120), "the model was not loaded again"
            answer = _chat(server.url, "hello there")
            assert answer.status_code == 200, answer.text
            assert answer.json()["choices"][0]["message"]["content"] == expected
        finally:
            again.stop()
    finally:
        code, err = server.stop()
    assert code == 0, err
    assert "is gone" in err and worker.endpoint in err, err
    assert "answers again: the model was loaded again" in err, err
    assert "Traceback" not in err


def _wait_health(url: str, status: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if httpx2.get(f"{url}/health", timeout=10).status_code == status:
                return True
        except httpx2.HTTPError:
            pass
        time.sleep(0.5)
    return False


def test_serve_rpc_ends_a_stream_cut_by_a_dead_worker_with_an_error_event(
    model: Path, tmp_path: Path, make_worker: Callable[[], Worker]
) -> None:
    worker = make_worker()
    args = [str(model), "--no-persist", "--rpc", worker.endpoint, "--gpu-layers", "all"]
    server = ServeProcess(args, tmp_path / "d")
    body = {
        "messages": [{"role": "user", "content": "tell a long story"}],
        "max_tokens": 3000,
        "temperature": 0,
        "stream": True,
    }
    events: list[str] = []
    try:
        with httpx2.stream(
            "POST", f"{server.url}/v1/chat/completions", json=body, timeout=90
        ) as reply:
            assert reply.status_code == 200
            for line in reply.iter_lines():
                if not line.startswith("data: "):
                    continue
                events.append(line[6:])
                if len(events) == 3:
                    worker.stop()  # mid-reply: llama.cpp aborts the model process
    finally:
        code, err = server.stop()
    assert code == 0, err
    assert events[-1] == "[DONE]", events[-3:]
    last = json.loads(events[-2])
    assert "error" in last, events[-3:]
    message = last["error"]["message"]
    assert worker.endpoint in message and message.endswith("."), message


def test_bench_rpc_reports_the_plan(model: Path, make_worker: Callable[[], Worker]) -> None:
    worker = make_worker()
    flags = ["--gpu-layers", "1", "--tabs", "1", "--n-prompt", "16", "--n-gen", "4", "--json"]
    done = subprocess.run(
        [sys.executable, "-m", "app", "bench", str(model), "--rpc", worker.endpoint, *flags],
        capture_output=True,
        text=True,
        env=cli_env(),
        cwd=ROOT,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["plan"].startswith("All 2 layers on the CPU, the output layer on RPC")
    assert result["gen_tokens_per_s_1_tab"] > 0


def test_serve_rpc_gives_up_a_reply_on_a_stopped_worker(
    model: Path, tmp_path: Path, make_worker: Callable[[], Worker]
) -> None:
    import os
    import signal

    worker = make_worker()
    args = [str(model), "--no-persist", "--rpc", worker.endpoint, "--gpu-layers", "all"]
    server = ServeProcess(args, tmp_path / "c")
    try:
        assert _chat(server.url, "hello there").status_code == 200
        os.kill(worker.process.pid, signal.SIGSTOP)  # hung: no answer, the socket stays open
        t0 = time.monotonic()
        stuck = _chat(server.url, "hello again")
        assert stuck.status_code >= 500 and "error" in stuck.json()
        assert time.monotonic() - t0 < 60
        # the model process is being replaced, or cannot load while the worker is stopped
        health = httpx2.get(f"{server.url}/health", timeout=10)
        assert health.status_code == 503, health.text
        assert worker.endpoint in health.json()["error"]["message"]
        os.kill(worker.process.pid, signal.SIGCONT)  # back: the model is loaded again
        assert _wait_health(server.url, 200, 120), "the model was not loaded again"
        assert _chat(server.url, "hello there").status_code == 200
    finally:
        code, err = server.stop(timeout=60)
    assert code == 0, err
    assert "Traceback" not in err
