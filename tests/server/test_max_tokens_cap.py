"""A ``max_tokens`` past the room left is capped, as llama-server does: the reply runs until
the context is full and ends with ``finish_reason: "length"``; only a prompt that does not
fit is refused."""

from __future__ import annotations

import json

import httpx2

from app.server import ServerConfig
from tests.server.conftest import MakeServer

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
N_CTX = 256  # one sequence's context: small, so that filling it takes a moment
ENDLESS = 'root ::= ("hello" | " world" | " tab" | " llama") root'


def test_a_large_max_tokens_runs_until_the_context_is_full(make_server: MakeServer) -> None:
    runner = make_server(ServerConfig(parallel=1, max_resident=1), n_ctx=N_CTX * 2)
    n_ctx = runner.service.served.get().n_ctx_seq
    body = {
        "messages": [{"role": "user", "content": "hello"}],
        "max_tokens": 100_000,  # many clients send a large default
        "grammar": ENDLESS,  # no end of generation: only the context can end it
        "temperature": 0,
    }
    with httpx2.Client(base_url=runner.url, timeout=120) as http:
        reply = http.post(CHAT, json=body)
        assert reply.status_code == 200, reply.text
        data = reply.json()
        assert data["choices"][0]["finish_reason"] == "length"
        usage = data["usage"]
        # (the last token is sampled from the full context's logits, never decoded)
        assert usage["prompt_tokens"] + usage["completion_tokens"] <= n_ctx + 1
        # the reply filled what the prompt left (not a reserve, not one token)
        assert usage["completion_tokens"] >= n_ctx - usage["prompt_tokens"] - 2

        # streamed: the same end, then [DONE]
        finishes: list[str] = []
        lines: list[str] = []
        with http.stream("POST", CHAT, json={**body, "stream": True}) as stream:
            assert stream.status_code == 200
            for line in stream.iter_lines():
                if line.startswith("data: "):
                    lines.append(line[6:])
        assert lines[-1] == "[DONE]"
        for chunk in lines[:-1]:
            for choice in json.loads(chunk).get("choices", []):
                if choice.get("finish_reason"):
                    finishes.append(choice["finish_reason"])
        assert finishes == ["length"]

        # /v1/completions with llama-server's n_predict
        reply = http.post(
            COMPLETIONS, json={"prompt": "hello", "n_predict": 50_000, "grammar": ENDLESS}
        )
        assert reply.status_code == 200, reply.text
        assert reply.json()["choices"][0]["finish_reason"] == "length"


def test_only_a_prompt_that_does_not_fit_is_refused(make_server: MakeServer) -> None:
    runner = make_server(ServerConfig(parallel=1, max_resident=1), n_ctx=N_CTX * 2)
    with httpx2.Client(base_url=runner.url, timeout=120) as http:
        long = "hello world " * 400
        reply = http.post(
            CHAT, json={"messages": [{"role": "user", "content": long}], "max_tokens": 4}
        )
        assert reply.status_code == 400, reply.text
        error = reply.json()["error"]
        assert error["code"] == "context_length_exceeded"
        assert error["param"] == "messages"
        assert error["message"].endswith("Shorten the prompt.")


def test_a_long_prompt_gets_what_room_is_left(make_server: MakeServer) -> None:
    # the prompt leaves less than the reply reserve (a quarter of the context): the reply
    # still gets the room that is left, not a 400 and not a trimmed history
    runner = make_server(ServerConfig(parallel=1, max_resident=1), n_ctx=N_CTX * 2)
    n_ctx = runner.service.served.get().n_ctx_seq
    body = {
        "messages": [{"role": "user", "content": "hello world " * 40}],
        "max_tokens": 100_000,
        "grammar": ENDLESS,
    }
    with httpx2.Client(base_url=runner.url, timeout=120) as http:
        reply = http.post(CHAT, json=body)
        assert reply.status_code == 200, reply.text
        usage = reply.json()["usage"]
        assert usage["prompt_tokens"] > n_ctx * 3 // 4
        assert reply.json()["choices"][0]["finish_reason"] == "length"
        assert usage["prompt_tokens"] + usage["completion_tokens"] >= n_ctx - 2
