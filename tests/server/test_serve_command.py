"""``llamadesk serve`` as a process: the OpenAI client, SIGTERM, caches across restarts."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx2
import numpy as np
import openai
import pytest

from app.storage import Database
from tests.server.conftest import ROOT
from tests.support.arch_models import SPECS, D, write_arch_model
from tests.support.serve_process import ServeProcess


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


def _embed(url: str, texts: list[str]) -> tuple[list[np.ndarray], int]:
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0, timeout=60)
    # Any model name: one model is served (the README's example says "local").
    result = client.embeddings.create(model="local", input=texts)
    assert [d.index for d in result.data] == list(range(len(texts)))
    return [np.array(d.embedding) for d in result.data], result.usage.prompt_tokens


def _props(url: str) -> dict[str, Any]:
    reply = httpx2.get(f"{url}/props", timeout=30)
    assert reply.status_code == 200, reply.text
    props: dict[str, Any] = reply.json()
    return props


@pytest.mark.parametrize("arch", ["llama", "qwen3", "gemma3"])
def test_serve_embeddings_from_the_command_line(
    serve: Callable[..., ServeProcess], tmp_path: Path, arch: str
) -> None:
    model = write_arch_model(tmp_path / f"{arch}.gguf", arch)
    proc = serve(str(model), "--embeddings", "-c", "1024", "-t", "1")
    texts = ["hello world", "the llama eats grass"]
    vectors, n_tokens = _embed(proc.url, texts)
    assert [v.shape for v in vectors] == [(D,), (D,)]
    assert [float(np.linalg.norm(v)) for v in vectors] == pytest.approx([1.0, 1.0], abs=1e-4)
    assert not np.allclose(vectors[0], vectors[1])
    # Each input alone gives the same vector as inside the batch.
    alone, _ = _embed(proc.url, texts[1:])
    assert alone[0] == pytest.approx(vectors[1], abs=1e-4)
    # usage counts the tokens each input was embedded from (BOS included, no specials).
    counts = [
        len(
            httpx2.post(
                f"{proc.url}/tokenize",
                json={"content": t, "add_special": True, "parse_special": False},
                timeout=30,
            ).json()["tokens"]
        )
        for t in texts
    ]
    assert n_tokens == sum(counts)
    # A generative model names no pooling: mean, not llama.cpp's "none" (no vector at all).
    assert _props(proc.url)["pooling"] == "mean"
    code, err = proc.stop()
    assert code == 0 and "Traceback" not in err, err


def test_serve_pooling_is_the_models_own_unless_chosen(
    serve: Callable[..., ServeProcess], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An embedding model that names its pooling in its header (last token, as Qwen3-Embedding).
    plain = SPECS["qwen3"]
    monkeypatch.setitem(
        SPECS, "qwen3", lambda: replace(plain(), header={**plain().header, "pooling_type": 3})
    )
    model = write_arch_model(tmp_path / "embedder.gguf", "qwen3")
    texts = ["hello world", "the llama eats grass"]
    own = serve(str(model), "--embeddings", "-c", "1024", "-t", "1", home=tmp_path / "h1")
    assert _props(own.url)["pooling"] == "last"
    by_model, _ = _embed(own.url, texts)
    own.stop()
    chosen = serve(
        str(model), "--embeddings", "--pooling", "mean", "-c", "1024", "-t", "1",
        home=tmp_path / "h2",
    )  # fmt: skip
    assert _props(chosen.url)["pooling"] == "mean"
    by_flag, _ = _embed(chosen.url, texts)
    assert not np.allclose(by_model[0], by_flag[0])  # the flag did reach the context
    chosen.stop()


def test_serve_pooling_needs_embeddings(long_model: Path, tmp_path: Path) -> None:
    env = dict(os.environ, LLAMADESK_HOME=str(tmp_path / "home"))
    for args, said in (
        (["--pooling", "mean"], "add --embeddings"),
        (["--embeddings", "--pooling", "none"], "invalid choice"),
    ):
        proc = subprocess.run(
            [sys.executable, "-m", "app", "serve", str(long_model), "--port", "0", *args],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode == 2, proc.stderr
        assert said in proc.stderr and "Traceback" not in proc.stderr
