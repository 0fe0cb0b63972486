"""``llamadesk run --remote`` against ``llamadesk serve`` on 127.0.0.1 (the tiny model):
the conversation is stored, listed by ``llamadesk chats``, and ``--conversation ID`` goes
on with it with the server's cache warm (``cached_tokens`` > 0)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from app.remote import ServerKind
from tests.remote.conftest import ROOT, RemoteChat
from tests.remote.stub_server import REPLY, StubServer
from tests.support.serve_process import ServeProcess

pytestmark = pytest.mark.timeout(180)


def llamadesk(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, LLAMADESK_HOME=str(home))
    return subprocess.run(
        [sys.executable, "-m", "app", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def run_json(home: Path, *args: str) -> dict[str, Any]:
    done = llamadesk(home, "run", *args, "--json", "--temp", "0", "-n", "8")
    assert done.returncode == 0, done.stderr
    data: dict[str, Any] = json.loads(done.stdout)
    return data


def test_run_remote_stores_and_continues_with_a_warm_cache(
    llamadesk_server: ServeProcess, tmp_path: Path
) -> None:
    home = tmp_path / "client-home"
    first = run_json(home, "--remote", llamadesk_server.url, "hello world")
    cid = first["conversation_id"]
    assert isinstance(cid, int) and first["engine"].startswith("LlamaDesk on 127.0.0.1:")
    assert first["error"] is None and first["prompt_tokens"] > 0
    assert isinstance(first["cached_tokens"], int)  # LlamaDesk reports them
    chats = llamadesk(home, "chats")
    assert chats.returncode == 0
    assert any(line.split("\t")[0] == str(cid) for line in chats.stdout.splitlines())

    second = run_json(
        home, "--remote", llamadesk_server.url, "--conversation", str(cid), "the cache"
    )
    assert second["conversation_id"] == cid
    assert second["cached_tokens"] > 0
    # only the new suffix was read again
    assert second["prompt_tokens_processed"] < second["prompt_tokens"] - first["prompt_tokens"] + 8
    assert second["prompt_tokens_processed"] + second["cached_tokens"] == second["prompt_tokens"]
    exported = llamadesk(home, "export", str(cid))
    thread = [m for m in json.loads(exported.stdout)["conversations"][0]["messages"]]
    assert [m["role"] for m in thread][:3] == ["user", "assistant", "user"]


def test_run_remote_refuses_what_needs_a_local_model(tmp_path: Path) -> None:
    done = llamadesk(tmp_path, "run", "--remote", "http://127.0.0.1:9", "--raw", "hi")
    assert done.returncode == 2 and "--raw works with a local model only" in done.stderr
    done = llamadesk(tmp_path, "run", "--conversation", "3", "hi")
    assert done.returncode == 2 and "through --remote URL" in done.stderr
    done = llamadesk(tmp_path, "run", "--remote", "http://192.0.2.1:8080", "hi")
    assert done.returncode == 2 and "--remote-allow-insecure-http" in done.stderr
    done = llamadesk(
        tmp_path, "run", "--remote", "http://127.0.0.1:9", "--conversation", "77", "hi"
    )
    assert done.returncode == 2 and "Conversation 77 does not exist" in done.stderr


def test_the_probe_knows_llamadesk(llamadesk_server: ServeProcess, remote_chat: Any) -> None:
    chat: RemoteChat = remote_chat(llamadesk_server.url)
    assert chat.loader.engine is not None
    traits = chat.loader.engine.traits
    assert traits.kind is ServerKind.LLAMADESK
    assert traits.n_ctx is not None and traits.n_ctx > 0
    assert traits.chat_template and traits.reports_cached is True
    cid, events = chat.new_conversation()
    turn = chat.turn(cid, events, "hello")
    assert turn.failed is None and turn.result.n_prompt > 0


def test_run_remote_against_a_plain_server_says_what_it_lacks(
    stub: Callable[..., StubServer], tmp_path: Path
) -> None:
    server = stub("openai")
    data = run_json(tmp_path, "--remote", server.url, "hi")
    assert data["text"] == "".join(REPLY) and data["error"] is None
    assert data["cached_tokens"] is None  # not reported: not a made-up 0
    assert any("does not report cached prompt tokens" in n for n in data["unavailable"])
    failed = llamadesk(tmp_path, "run", "--remote", server.url, "--json", "x [drop]")
    assert failed.returncode == 1
    partial = json.loads(failed.stdout)
    assert partial["finish_reason"] == "aborted" and "broke off" in partial["error"]
    assert partial["text"] == "".join(REPLY[:2])  # kept, as the database has it


def test_a_failed_load_leaves_no_empty_conversation(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    done = llamadesk(tmp_path, "run", "--remote", f"http://127.0.0.1:{port}", "hi")
    assert done.returncode == 2 and "nothing answers there" in done.stderr
    assert "No conversations yet" in llamadesk(tmp_path, "chats").stderr
