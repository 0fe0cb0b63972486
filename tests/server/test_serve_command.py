"""``llamadesk serve`` as a process: the OpenAI client, SIGTERM, caches across restarts."""

from __future__ import annotations

import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import openai

from app.storage import Database
from tests.server.conftest import ServeProcess


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
