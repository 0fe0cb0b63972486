"""``llamadesk serve --remote URL``: this machine's server as a front for another one
(here a stub server), with its named conversations and request log."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import openai
import pytest

from tests.remote.stub_server import REPLY, StubServer
from tests.support.serve_process import ServeProcess

pytestmark = pytest.mark.timeout(120)


def test_serve_remote_fronts_the_remote_server(
    stub: Callable[..., StubServer], tmp_path: Path
) -> None:
    upstream = stub("openai")
    front = ServeProcess(["--remote", upstream.url], tmp_path / "front-home")
    try:
        client = openai.OpenAI(base_url=f"{front.url}/v1", api_key="x", max_retries=0)
        models = [m.id for m in client.models.list()]
        assert models == ["stub-model"]
        reply = client.chat.completions.create(
            model="stub-model",
            messages=[{"role": "user", "content": "hello"}],
            extra_body={"conversation": "front-1"},
        )
        assert reply.choices[0].message.content == "".join(REPLY)
        pieces = client.chat.completions.create(
            model="stub-model",
            messages=[
                {"role": "user", "content": "hello"},
                {"role": "assistant", "content": "".join(REPLY)},
                {"role": "user", "content": "again"},
            ],
            stream=True,
        )
        assert "".join(c.choices[0].delta.content or "" for c in pieces if c.choices) == "".join(
            REPLY
        )
        sent = upstream.chat_bodies()
        assert [m["content"] for m in sent[-1]["messages"]][-1] == "again"
        with pytest.raises(openai.APIStatusError) as info:
            client.chat.completions.create(
                model="stub-model", messages=[{"role": "user", "content": "x [500]"}]
            )
        assert "failed while answering (HTTP 500)" in str(info.value)
    finally:
        code, err = front.stop()
    assert code == 0, err


def test_serve_remote_refuses_a_model_file(tmp_path: Path) -> None:
    with pytest.raises(AssertionError, match="no model file"):
        ServeProcess(["model.gguf", "--remote", "http://127.0.0.1:9"], tmp_path)
