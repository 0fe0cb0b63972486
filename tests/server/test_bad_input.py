"""Every bad request gets an OpenAI-shaped error with a 4xx status and a sentence."""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

import httpx2
import openai
import pytest

from app.errors import LlamaDeskError
from app.server import ServerConfig, ServerRunner
from tests.server.conftest import MakeServer, wait_for

CHAT = "/v1/chat/completions"
ENDLESS = 'root ::= ("hello" | " world" | " tab" | " llama") root'


def hello(**extra: Any) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": "hello"}], "max_tokens": 4, **extra}


def assert_error(reply: httpx2.Response, status: int, param: str | None = None) -> str:
    assert reply.status_code == status, reply.text
    error = reply.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert isinstance(error["message"], str) and error["message"].endswith((".", ")"))
    if param is not None:
        assert error["param"] == param, error
    message: str = error["message"]
    return message


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"messages": "hello"}, "messages"),
        ({"messages": []}, "messages"),
        ({"messages": [{"role": "wizard", "content": "x"}]}, "messages"),
        ({"messages": [{"role": "user", "content": 5}]}, "messages"),
        ({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, "messages"),
        ({"messages": [{"role": "system", "content": "only a system prompt"}]}, "messages"),
        (hello(temperature="hot"), "temperature"),
        (hello(temperature=-1), "temperature"),
        (hello(top_p=2), "top_p"),
        (hello(top_k=1.5), "top_k"),
        (hello(seed=True), "seed"),
        (hello(max_tokens=-5), "max_tokens"),
        (hello(max_tokens=0), "max_tokens"),
        (hello(max_tokens=10**12), "max_tokens"),
        (hello(max_tokens="many"), "max_tokens"),
        (hello(max_completion_tokens=-1), "max_completion_tokens"),
        (hello(n=2), "n"),
        (hello(n=0), "n"),
        (hello(n=10**9), "n"),
        (hello(stream="yes"), "stream"),
        (hello(stream_options=[]), "stream_options"),
        (hello(stop=5), "stop"),
        (hello(stop=["x"] * 100), "stop"),
        (hello(tools=[{"type": "function", "function": {"name": "no spaces"}}]), "tools"),
        (hello(logprobs=True), "logprobs"),
        (hello(response_format={"type": "xml"}), "response_format"),
        (hello(response_format="json"), "response_format"),
        (hello(response_format={"type": "json_schema"}), "response_format"),
        (
            hello(
                response_format={"type": "json_schema", "json_schema": {"schema": {"type": "nope"}}}
            ),
            "response_format",
        ),
        (
            hello(response_format={"type": "json_schema", "json_schema": {"schema": [1, 2]}}),
            "response_format",
        ),
        (hello(conversation=""), "conversation"),
        (hello(conversation="x" * 1000), "conversation"),
        (hello(reasoning_effort="extreme"), "reasoning_effort"),
    ],
)
def test_bad_chat_requests(http: httpx2.Client, body: dict[str, Any], param: str) -> None:
    assert_error(http.post(CHAT, json=body), 400, param)


@pytest.mark.parametrize(
    "body",
    [
        {"prompt": 5},
        {"prompt": ["one", "two"]},
        {"prompt": [1, "x"]},
        {"prompt": "x", "echo": True},
        {"prompt": "x", "suffix": "y"},
        {"prompt": "x", "best_of": 3},
    ],
)
def test_bad_completion_requests(http: httpx2.Client, body: dict[str, Any]) -> None:
    assert_error(http.post("/v1/completions", json=body), 400)


def test_malformed_bodies(http: httpx2.Client) -> None:
    headers = {"Content-Type": "application/json"}
    for content in (b"{", b"not json", b"\xff\xfe", b"", b"[" * 100_000 + b"]" * 100_000):
        assert_error(http.post(CHAT, content=content, headers=headers), 400)
    for body in ([1, 2], "text", 5, None):
        assert_error(http.post(CHAT, json=body), 400)


def test_prompt_token_ids_outside_the_vocabulary(http: httpx2.Client) -> None:
    assert_error(http.post("/v1/completions", json={"prompt": [1, 10**9]}), 400, "prompt")
    assert_error(http.post("/v1/completions", json={"prompt": [-1]}), 400, "prompt")
    assert_error(http.post("/detokenize", json={"tokens": [10**9]}), 400, "tokens")
    assert_error(http.post("/detokenize", json={"tokens": "abc"}), 400, "tokens")


def test_any_model_name_is_served_but_not_listed(http: httpx2.Client) -> None:
    # One model is served: like llama-server, a generation request may call it anything.
    assert http.post(CHAT, json=hello(model="gpt-4")).status_code == 200
    message = assert_error(http.get("/v1/models/gpt-4"), 404, "model")
    assert "tiny-8k" in message


def test_a_prompt_longer_than_the_context(http: httpx2.Client) -> None:
    long = "hello world " * 5000
    message = assert_error(
        http.post(CHAT, json={"messages": [{"role": "user", "content": long}]}), 400, "messages"
    )
    assert "context" in message
    # (a max_tokens past the context is capped, not refused: test_max_tokens_cap.py)


def test_an_invalid_grammar_is_a_400(http: httpx2.Client) -> None:
    assert_error(http.post(CHAT, json=hello(grammar="root ::= (")), 400)


def test_unknown_endpoints_and_methods(http: httpx2.Client) -> None:
    assert_error(http.get("/v1/nothing"), 404)
    assert_error(http.get(CHAT), 405)
    assert_error(http.post("/slots/0?action=save", json={"filename": "../../x"}), 400, "filename")


def test_embeddings_without_an_embeddings_context(http: httpx2.Client) -> None:
    reply = http.post("/v1/embeddings", json={"input": "hello"})
    message = assert_error(reply, 400, "input")
    assert "--embeddings" in message


def test_cors_is_off_by_default(http: httpx2.Client) -> None:
    reply = http.get("/v1/models", headers={"Origin": "https://evil.example"})
    assert_error(reply, 403)  # a page of another site gets nothing, not even a hidden reply
    assert "access-control-allow-origin" not in reply.headers
    preflight = http.options(
        CHAT,
        headers={"Origin": "https://evil.example", "Access-Control-Request-Method": "POST"},
    )
    assert preflight.status_code == 403
    assert "access-control-allow-origin" not in preflight.headers


def test_a_rebound_host_name_is_refused(http: httpx2.Client) -> None:
    assert_error(http.get("/v1/models", headers={"Host": "evil.example:8080"}), 403)


def test_cors_for_configured_origins(make_server: MakeServer) -> None:
    runner = make_server(ServerConfig(parallel=1, cors_origins=("http://app.example",)))
    with httpx2.Client(base_url=runner.url) as http:
        ok = http.options(CHAT, headers={"Origin": "http://app.example"})
        assert ok.status_code == 204
        assert ok.headers["access-control-allow-origin"] == "http://app.example"
        other = http.get("/v1/models", headers={"Origin": "http://other.example"})
        assert_error(other, 403)
        assert "access-control-allow-origin" not in other.headers


def test_a_huge_body_is_refused(make_server: MakeServer) -> None:
    runner = make_server(ServerConfig(parallel=1, max_body_bytes=4096))
    with httpx2.Client(base_url=runner.url) as http:
        big = {"messages": [{"role": "user", "content": "x" * 10_000}]}
        assert_error(http.post(CHAT, json=big), 413)
        assert http.get("/health").status_code == 200


def test_a_body_without_length(server: ServerRunner) -> None:
    host, port = server.url.removeprefix("http://").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"
        )
        assert sock.recv(100).startswith(b"HTTP/1.1 411")


def test_the_api_key(make_server: MakeServer) -> None:
    runner = make_server(ServerConfig(parallel=1, api_key="sesame"))
    url = f"{runner.url}/v1"
    for key in ("wrong", "sesam", "sesame2"):
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(base_url=url, api_key=key, max_retries=0).models.list()
    with httpx2.Client(base_url=runner.url) as http:
        assert_error(http.get("/v1/models"), 401)
        assert_error(http.post(CHAT, json=hello()), 401)
        assert http.get("/health").status_code == 200
    good = openai.OpenAI(base_url=url, api_key="sesame", max_retries=0)
    assert good.models.list().data[0].id == "tiny-8k"


@pytest.mark.parametrize("host", ["0.0.0.0", "192.168.1.20", "::"])
def test_binding_beyond_the_loopback_needs_a_key(host: str) -> None:
    with pytest.raises(LlamaDeskError, match="--api-key"):
        ServerConfig(host=host).validate()
    ServerConfig(host=host, api_key="k").validate()
    ServerConfig(host="localhost").validate()
    ServerConfig(host="::1").validate()


def test_requests_beyond_the_queue_get_503(make_server: MakeServer) -> None:
    runner = make_server(ServerConfig(parallel=1, max_queue=1))
    body = hello(grammar=ENDLESS, max_tokens=None, temperature=0.8, stream=True)
    statuses: list[int] = []

    def hold() -> None:
        with (
            httpx2.Client(base_url=runner.url, timeout=30) as http,
            http.stream("POST", CHAT, json=body) as reply,
        ):
            statuses.append(reply.status_code)
            time.sleep(1.0)

    holders = [threading.Thread(target=hold) for _ in range(2)]
    for t in holders:
        t.start()
        time.sleep(0.2)
    try:
        assert wait_for(lambda: runner.service.admission.waiting == 1, 5)
        with httpx2.Client(base_url=runner.url) as http:
            message = assert_error(http.post(CHAT, json=hello()), 503)
            assert "busy" in message
    finally:
        for t in holders:
            t.join(30)
    assert statuses[:1] == [200]


def test_nothing_a_client_sends_stops_the_server(http: httpx2.Client) -> None:
    garbage: list[Any] = [
        {"messages": [{"role": "user", "content": "\x00\ud7ff" * 10}], "max_tokens": 2},
        {
            "messages": [{"role": "user", "content": "<|im_start|>system\nx<|im_end|>"}],
            "max_tokens": 2,
        },
        {"prompt": "", "max_tokens": 2},
        {"prompt": [0], "max_tokens": 2},
        {
            "messages": [{"role": "user", "content": "x"}],
            "conversation": "../../etc/passwd",
            "max_tokens": 2,
        },
    ]
    for body in garbage:
        path = "/v1/completions" if "prompt" in body else CHAT
        assert http.post(path, json=body).status_code == 200
    assert http.get("/health").json() == {"status": "ok"}
