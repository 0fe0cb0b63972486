"""``serve --remote URL`` answers ``/v1/completions``, ``/props``, ``/tokenize``,
``/detokenize`` and ``/apply-template`` through the remote server (they were 400s: "does
not support calls into an in-process engine"). Upstream: ``llamadesk serve`` with the tiny
model, and llama.cpp's own llama-server; a plain OpenAI server (the stub) lacks the
llama-server routes, which the front then says in a sentence."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

from tests.remote.llama_server_process import start_llama_server
from tests.remote.stub_server import StubServer
from tests.support.serve_process import ServeProcess

pytestmark = pytest.mark.timeout(180)

MESSAGES = [{"role": "user", "content": "hello there"}]
GREEDY = {"prompt": "hello world", "max_tokens": 6, "temperature": 0, "seed": 1}


@pytest.fixture(params=["llamadesk", "llama-server"])
def upstream(
    request: pytest.FixtureRequest, tiny_model: Path, llamadesk_server: ServeProcess
) -> Iterator[str]:
    if request.param == "llamadesk":
        yield llamadesk_server.url
        return
    proc, url = start_llama_server(tiny_model)
    yield url
    proc.terminate()
    proc.wait(30)


def _events(http: httpx2.Client, body: dict[str, Any]) -> list[str]:
    with http.stream("POST", "/v1/completions", json={**body, "stream": True}) as reply:
        assert reply.status_code == 200, reply.read()
        return [line[6:] for line in reply.iter_lines() if line.startswith("data: ")]


def test_the_front_serves_the_remote_routes(upstream: str, tmp_path: Path) -> None:
    front = ServeProcess(["--remote", upstream], tmp_path / "front-home")
    try:
        with (
            httpx2.Client(base_url=front.url, timeout=60) as http,
            httpx2.Client(base_url=upstream, timeout=60) as direct,
        ):
            # tokenize / detokenize / apply-template: the remote server's own answers
            body = {"content": "hello world, hello tab", "add_special": True}
            tokens = http.post("/tokenize", json=body)
            assert tokens.status_code == 200, tokens.text
            assert tokens.json() == direct.post("/tokenize", json=body).json()
            ids = tokens.json()["tokens"]
            text = http.post("/detokenize", json={"tokens": ids})
            assert text.status_code == 200, text.text
            assert text.json() == direct.post("/detokenize", json={"tokens": ids}).json()
            rendered = http.post("/apply-template", json={"messages": MESSAGES})
            assert rendered.status_code == 200, rendered.text
            expected = direct.post("/apply-template", json={"messages": MESSAGES}).json()
            assert rendered.json()["prompt"] == expected["prompt"]
            # bad input is refused here, as by a local model
            assert http.post("/apply-template", json={"messages": "x"}).status_code == 400
            assert http.post("/v1/completions", json={"prompt": 5}).status_code == 400

            # /props: this front's, with the remote model's context and template
            props = http.get("/props")
            assert props.status_code == 200, props.text
            theirs = direct.get("/props").json()
            mine = props.json()
            assert mine["build_info"].startswith("LlamaDesk")
            assert mine["remote"]["url"] == upstream
            n_ctx = theirs["default_generation_settings"]["n_ctx"]
            assert mine["default_generation_settings"]["n_ctx"] == n_ctx
            assert mine["chat_template"] == theirs["chat_template"]

            # /v1/completions: the remote server's completion, whole and streamed
            reply = http.post("/v1/completions", json={**GREEDY, "model": "any-name"})
            assert reply.status_code == 200, reply.text
            whole = reply.json()
            assert whole["choices"][0]["finish_reason"] == "length"
            assert whole["usage"]["completion_tokens"] == GREEDY["max_tokens"]
            assert (
                whole["choices"][0]["text"]
                == (direct.post("/v1/completions", json=GREEDY).json()["choices"][0]["text"])
            )
            events = _events(http, GREEDY)
            assert events[-1] == "[DONE]"
            chunks = [json.loads(e) for e in events[:-1]]
            assert not any("error" in c for c in chunks)
            streamed = "".join(c["choices"][0].get("text", "") for c in chunks if c["choices"])
            assert streamed == whole["choices"][0]["text"]
    finally:
        code, err = front.stop()
    assert code == 0, err


def test_a_server_without_the_routes_is_said(
    stub: Callable[..., StubServer], tmp_path: Path
) -> None:
    upstream = stub("openai")
    front = ServeProcess(["--remote", upstream.url], tmp_path / "front-home")
    try:
        with httpx2.Client(base_url=front.url, timeout=60) as http:
            reply = http.post("/tokenize", json={"content": "hi"})
            assert reply.status_code == 501, reply.text
            message = reply.json()["error"]["message"]
            assert "does not offer /tokenize" in message and message.endswith(".")
            assert http.get("/props").status_code == 200
    finally:
        code, err = front.stop()
    assert code == 0, err
