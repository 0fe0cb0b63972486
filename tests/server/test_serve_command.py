"""``llamadesk serve`` as a process: the OpenAI client, SIGTERM, caches across restarts."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import openai

from app.storage import Database
from tests.server.conftest import ROOT, ServeProcess


def chat(url: str, messages: list[Any], conversation: str | None = None) -> Any:
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0, timeout=60)
    extra = {"conversation": conversation} if conversation else {}
    return client.chat.completions.create(
        model="tiny-8k", messages=messages, max_tokens=6, temperature=0, extra_body=extra
    )


def test_serve_keeps_a_named_conversation_warm_across_restarts(
    serve: Callable[..., ServeProcess], long_model: Path, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    args = [str(long_model), "-c", "4096", "-t", "1", "--parallel", "2"]
    proc = serve(*args, home=home)
    history: list[Any] = [{"role": "user", "content": "remember the llama " * 30}]
    first = chat(proc.url, history, "agent-1")
    assert first.usage.prompt_tokens_details.cached_tokens == 0
    code, err = proc.stop()  # SIGTERM: a clean shutdown saves the conversation's cache
    assert code == 0, err
    assert "Traceback" not in err

    proc = serve(*args, home=home)
    history += [
        {"role": "assistant", "content": first.choices[0].message.content},
        {"role": "user", "content": "what was it"},
    ]
    second = chat(proc.url, history, "agent-1")
    cached = second.usage.prompt_tokens_details.cached_tokens
    assert cached >= first.usage.prompt_tokens  # restored from its state file
    proc.proc.send_signal(signal.SIGINT)  # Ctrl+C
    proc.proc.communicate(timeout=30)
    assert proc.proc.returncode == 0

    db = Database.open(home / "llamadesk.sqlite3")
    try:
        stored = [c for c in db.list_conversations() if c.sampling.get("api_conversation")]
        assert [c.sampling["api_conversation"] for c in stored] == ["agent-1"]
        thread = db.get_thread(stored[0].id)
        assert [m.role for m in thread] == ["user", "assistant", "user", "assistant"]
        assert thread[1].content == first.choices[0].message.content
        assert thread[3].content == second.choices[0].message.content
    finally:
        db.close()


def test_serve_refuses_other_devices_without_a_key(
    serve: Callable[..., ServeProcess], long_model: Path
) -> None:
    try:
        serve(str(long_model), "--host", "0.0.0.0")
    except AssertionError as exc:
        assert "--api-key" in str(exc)
    else:
        raise AssertionError("serve listened on 0.0.0.0 without a key")


def test_serve_reports_a_port_in_use_before_loading_the_model(
    long_model: Path, tmp_path: Path
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = dict(os.environ, LLAMADESK_HOME=str(tmp_path / "home"))
        for model in (tmp_path / "missing.gguf", long_model):
            t0 = time.monotonic()
            proc = subprocess.run(
                [sys.executable, "-m", "app", "serve", str(model), "--port", str(port)],
                cwd=ROOT,
                env=env,
                capture_output=True,
                text=True,
                timeout=60,
            )
            # the port is checked first: a missing model is not even looked at
            assert proc.returncode == 2, proc.stderr
            assert f"Port {port} on 127.0.0.1 is already in use" in proc.stderr
            assert "choose another port" in proc.stderr and "missing" not in proc.stderr
            assert "Traceback" not in proc.stderr
            assert time.monotonic() - t0 < 20
