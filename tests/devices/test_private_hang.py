"""A private model process (``serve --rpc``, the window) whose remote worker is stopped
mid-reply is killed and replaced by the supervisor's watchdog (the decode heartbeat), so
the next request is answered, or refused at once with a sentence, instead of every request
waiting for the read timeout behind a child stuck in ``llama_decode``."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

import httpx2
import pytest

from app.rpc_supervisor import PRIVATE_READ_TIMEOUT_S, PrivateServer
from tests.devices.conftest import Worker, private_server, wait_until
from tests.support.serve_process import ServeProcess

HANG_S = 3.0  # the watchdog's limit here (the default is 30 s)


def _body(stream: bool, max_tokens: int) -> dict[str, object]:
    return {
        "messages": [{"role": "user", "content": "tell a long story"}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": stream,
    }


def _stop_mid_reply(private: PrivateServer, worker: Worker) -> float:
    """Stream a long reply, SIGSTOP the worker after its first piece: the seconds until
    the reply broke off."""
    headers = {"Authorization": f"Bearer {private.key}"}
    url = f"{private.url}/v1/chat/completions"
    t0 = 0.0
    with pytest.raises(httpx2.HTTPError):  # the break comes while reading
        with httpx2.stream(
            "POST", url, json=_body(True, 1500), headers=headers, timeout=PRIVATE_READ_TIMEOUT_S
        ) as response:
            assert response.status_code == 200
            for line in response.iter_lines():
                if line.startswith("data:") and not t0:
                    os.kill(worker.process.pid, signal.SIGSTOP)  # hung: the socket stays open
                    t0 = time.monotonic()
    assert t0, "the reply never began"
    return time.monotonic() - t0


def test_a_stopped_worker_gets_its_model_process_replaced(
    private_model: Path, make_worker: Callable[[], Worker]
) -> None:
    worker = make_worker()
    told: list[str] = []
    private = private_server(private_model, worker, told, hang_s=HANG_S)
    try:
        first = private.child.pid
        waited = _stop_mid_reply(private, worker)
        assert waited < HANG_S + 10  # the watchdog ended it, not the 45 s read timeout
        assert "a new model process is starting" in private.connection().label
        os.kill(worker.process.pid, signal.SIGCONT)  # the worker is back
        assert wait_until(lambda: private.restarts == 1 and private.child.pid != first, 30)
        t0 = time.monotonic()
        answer = None
        while time.monotonic() - t0 < 60 and answer is None:
            try:
                answer = httpx2.post(
                    f"{private.url}/v1/chat/completions",
                    json=_body(False, 4),
                    headers={"Authorization": f"Bearer {private.key}"},
                    timeout=30,
                )
            except httpx2.ConnectError:  # the new process is still binding its port
                time.sleep(0.5)
        assert answer is not None and answer.status_code == 200, answer and answer.text
        assert private.alive() and private.child.pid != first
        assert any("started again" in text and worker.endpoint in text for text in told), told
    finally:
        private.close()
    assert not private.alive()


def test_a_worker_that_stays_stopped_gets_a_sentence_at_once(
    private_model: Path, make_worker: Callable[[], Worker]
) -> None:
    worker = make_worker()
    told: list[str] = []
    private = private_server(private_model, worker, told, hang_s=HANG_S)
    try:
        first = private.child.pid
        _stop_mid_reply(private, worker)
        # The new process probes the stopped worker (with a timeout) and cannot load.
        assert wait_until(lambda: any("could not start" in text for text in told), 60), told
        assert private.restarts == 1 and private.child.pid != first and not private.alive()
        assert worker.endpoint in told[-1]
        assert "gone" in private.connection().label
        t0 = time.monotonic()
        with pytest.raises(httpx2.ConnectError):  # refused at once, not after 45 s
            httpx2.post(f"{private.url}/v1/chat/completions", json=_body(False, 4), timeout=30)
        assert time.monotonic() - t0 < 5
    finally:
        private.close()


def test_serve_says_the_worker_is_gone_when_its_model_process_dies(
    private_model: Path, tmp_path: Path, make_worker: Callable[[], Worker]
) -> None:
    worker = make_worker()
    args = [str(private_model), "--no-persist", "--rpc", worker.endpoint, "--gpu-layers", "all"]
    server = ServeProcess(args, tmp_path / "serve")
    try:
        url = f"{server.url}/v1/chat/completions"
        assert httpx2.post(url, json=_body(False, 4), timeout=90).status_code == 200
        worker.stop()  # the worker goes away: llama.cpp aborts the model process
        failed = httpx2.post(url, json=_body(False, 4), timeout=90)
        message = failed.json()["error"]["message"]
        assert failed.status_code >= 500
        assert worker.endpoint in message and "gone" in message, message
    finally:
        code, err = server.stop()
    assert code == 0, err
