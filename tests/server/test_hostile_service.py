"""A hostile client of the endpoints (issue 18, items 4-6): each input gets a JSON error
with its sentence, no other client waits on it, and the server serves the next request."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx2
import openai
import pytest

from app.server import ServerConfig, ServerRunner
from tests.server.conftest import MakeServer, start_server
from tests.support.serve_process import ServeProcess

CHAT = "/v1/chat/completions"
# Just under the 8 MiB body bound once JSON-encoded.
HUGE = "hello world " * (7 * (1 << 20) // 12)
# The bound for a refusal and for a concurrent small chat is 2 s on an idle machine
# (milliseconds here when idle); a busy 2-core CI machine gets five times that. What the
# tests tell apart, a refusal that reads the whole 7 MiB as tokens and small chats queued
# behind it, shows as well within 10 s.
FAST_S = 10.0


def hello(**extra: Any) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4, **extra}


def error_of(reply: httpx2.Response, status: int, param: str | None = None) -> dict[str, Any]:
    assert reply.status_code == status, reply.text[:500]
    assert reply.headers["content-type"].startswith("application/json")
    error: dict[str, Any] = reply.json()["error"]
    assert error["message"].endswith("."), error  # a sentence
    if param is not None:
        assert error["param"] == param, error
    return error


def still_serves(http: httpx2.Client) -> None:
    reply = http.post(CHAT, json=hello())
    assert reply.status_code == 200, reply.text[:500]
    assert reply.json()["choices"][0]["message"]["content"] is not None


@pytest.fixture(scope="module")
def embed_server(
    long_model: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerRunner]:
    # n_seq_max 4 divides the micro-batch (llama.cpp aborts on embeddings otherwise).
    runner = start_server(
        long_model,
        tmp_path_factory.mktemp("embed-home"),
        ServerConfig(parallel=2, max_resident=2),
        embeddings=True,
        pooling_type="mean",
    )
    yield runner
    runner.close()


@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        (CHAT, {"messages": [{"role": "user", "content": HUGE}], "max_tokens": 4}, "messages"),
        ("/v1/completions", {"prompt": HUGE, "max_tokens": 4}, "prompt"),
        ("/tokenize", {"content": HUGE}, "content"),
    ],
    ids=["chat", "completions", "tokenize"],
)
def test_a_body_near_the_bound_is_refused_fast_and_holds_no_one_up(
    http: httpx2.Client, path: str, body: dict[str, Any], param: str
) -> None:
    refused: dict[str, Any] = {}

    def send_huge() -> None:
        with httpx2.Client(base_url=str(http.base_url), timeout=60) as own:
            t0 = time.monotonic()
            refused["reply"] = own.post(path, json=body)
            refused["seconds"] = time.monotonic() - t0

    sender = threading.Thread(target=send_huge)
    sender.start()
    waits: list[float] = []
    while sender.is_alive() or not waits:  # small chats all the while the huge one runs
        t0 = time.monotonic()
        still_serves(http)
        waits.append(time.monotonic() - t0)
    sender.join()
    load = os.getloadavg()[0]
    error = error_of(refused["reply"], 400, param)
    assert "at least" in error["message"], error
    assert refused["seconds"] < FAST_S, (refused["seconds"], load)
    assert max(waits) < FAST_S, (waits, load)
    if path != "/tokenize":
        assert error["code"] == "context_length_exceeded"
        assert "context holds 8,192" in error["message"]
    still_serves(http)


def test_a_token_array_beyond_the_bound(http: httpx2.Client) -> None:
    error = error_of(
        http.post("/v1/completions", json={"prompt": [1] * ((1 << 20) + 1), "max_tokens": 1}),
        400,
        "prompt",
    )
    assert "at most 1,048,576" in error["message"]
    error = error_of(http.post("/detokenize", json={"tokens": [1] * ((1 << 20) + 1)}), 400)
    assert "at most" in error["message"]
    still_serves(http)


def test_a_prompt_just_over_the_context_is_counted_exactly(http: httpx2.Client) -> None:
    # Over the context by one token: refused with the exact count; one repetition less fits
    # (tests/engine/test_tokenizer.py has the same near the limit on the pieces path).
    def count(m: int) -> int:
        reply = http.post("/tokenize", json={"content": "the llama eats grass. " * m})
        return len(reply.json()["tokens"])

    low, high = 1, 1500  # the fewest repetitions with 8,191 tokens or more (BOS: 8,192)
    assert count(high) >= 8191
    while low < high:
        mid = (low + high) // 2
        low, high = (mid + 1, high) if count(mid) < 8191 else (low, mid)
    text = "the llama eats grass. " * low
    n = count(low) + 1  # with BOS
    error = error_of(
        http.post("/v1/completions", json={"prompt": text, "max_tokens": 1}), 400, "prompt"
    )
    assert f"at least {n:,} tokens" in error["message"], (n, error)
    shorter = "the llama eats grass. " * (low - 1)
    reply = http.post("/v1/completions", json={"prompt": shorter, "max_tokens": 1})
    assert reply.status_code == 200, reply.text[:300]  # just fits: answered
    still_serves(http)


def test_large_inputs_that_fit_are_answered(http: httpx2.Client) -> None:
    text = "the llama eats grass. " * 2000  # 44k characters: the pieces path, then whole
    tokens = http.post("/tokenize", json={"content": text}).json()["tokens"]
    assert len(tokens) > 8192
    content = http.post("/detokenize", json={"tokens": tokens}).json()["content"]
    assert content.lstrip(" ") == text  # SentencePiece's leading space aside
    reply = http.post("/v1/completions", json={"prompt": tokens[:8000], "max_tokens": 2})
    assert reply.status_code == 200, reply.text[:300]
    assert reply.json()["usage"]["prompt_tokens"] == 8000


def test_a_huge_embedding_input_is_refused_fast(embed_server: ServerRunner) -> None:
    client = openai.OpenAI(
        base_url=f"{embed_server.url}/v1", api_key="x", max_retries=0, timeout=60
    )
    t0 = time.monotonic()
    with pytest.raises(openai.BadRequestError) as refused:
        client.embeddings.create(model="any-name", input=["hello", HUGE])
    assert time.monotonic() - t0 < FAST_S
    message = refused.value.body["message"]  # type: ignore[index]
    assert message.startswith("Input 1 has at least") and "at most 256" in message
    many = client.embeddings.create(model="any-name", input=["hello world"] * 64)
    one = client.embeddings.create(model="any-name", input="hello world")
    assert len(many.data) == 64 and many.usage.prompt_tokens == 64 * one.usage.prompt_tokens
    assert many.data[63].embedding == pytest.approx(one.data[0].embedding, abs=1e-4)


def test_embeddings_refused_on_a_context_without_them(http: httpx2.Client) -> None:
    error = error_of(http.post("/v1/embeddings", json={"input": HUGE}), 400, "input")
    assert "--embeddings" in error["message"]
    still_serves(http)


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads /proc")
def test_memory_returns_after_large_requests(
    serve: Callable[..., ServeProcess], long_model: Path
) -> None:
    proc = serve(str(long_model), "-c", "8192", "-t", "1", "--parallel", "2", "--no-persist")
    with httpx2.Client(base_url=proc.url, timeout=120) as http:
        for _ in range(3):  # warm: every endpoint once, small
            still_serves(http)
            http.post("/tokenize", json={"content": "hello world"})
            http.post("/v1/completions", json={"prompt": "hello", "max_tokens": 2})
        time.sleep(0.5)
        baseline = _rss_mib(proc.server_pid)
        for _ in range(6):
            big = {"messages": [{"role": "user", "content": HUGE}], "max_tokens": 4}
            error_of(http.post(CHAT, json=big), 400, "messages")
            error_of(http.post("/v1/completions", json={"prompt": HUGE}), 400, "prompt")
            error_of(http.post("/tokenize", json={"content": HUGE}), 400, "content")
            still_serves(http)
        time.sleep(0.5)
        after = _rss_mib(proc.server_pid)
    # Measured here: +1 MB; +21 MB without app.server.heap (the heap kept each thread's
    # body copies; the issue saw +150 MB over its hostile run); one body copy kept per
    # request would be 18 x 7 MiB. Allowed: what warm caches and the arenas may hold.
    assert after - baseline < 12, (baseline, after)
    code, err = proc.stop()
    assert code == 0 and "Traceback" not in err, err


@pytest.mark.parametrize("pooling", ["none", "rank"])
def test_embeddings_from_a_context_that_pools_none_or_ranks(
    make_server: MakeServer, pooling: str
) -> None:
    # "rank" used to read n_embd floats where llama.cpp keeps one score: refused instead.
    runner = make_server(
        ServerConfig(parallel=2, max_resident=2), embeddings=True, pooling_type=pooling
    )
    with httpx2.Client(base_url=runner.url, timeout=60) as http:
        error = error_of(http.post("/v1/embeddings", json={"input": "hello"}), 400, "input")
        assert f"'{pooling}'" in error["message"] and "--pooling mean" in error["message"]
        assert error["code"] == "pooling_unsupported"
        assert http.get("/health").json() == {"status": "ok"}
