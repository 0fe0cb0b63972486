"""llama-server's endpoints, where users script against them."""

from __future__ import annotations

from pathlib import Path

import httpx2

from app.server import ServerConfig, ServerRunner
from tests.server.conftest import MakeServer
from tests.support.gguf_models import TinySpec, write_tiny_model


def test_health_and_props(http: httpx2.Client, server: ServerRunner) -> None:
    assert http.get("/health").json() == {"status": "ok"}
    props = http.get("/props").json()
    assert props["total_slots"] == 8
    assert props["default_generation_settings"]["n_ctx"] == 8192
    assert props["model_path"].endswith("tiny-8k.gguf")
    assert "im_start" in props["chat_template"]
    assert props["chat_template_source"] == "model" and props["model_has_chat_template"]
    names = {p["name"] for p in props["api_parameters"]}
    assert {"temperature", "top_k", "seed", "max_tokens", "grammar"} <= names


def test_props_name_the_builtin_template_a_model_without_one_gets(
    make_server: MakeServer, tmp_path: Path
) -> None:
    bare = write_tiny_model(tmp_path / "bare.gguf", TinySpec(chat_template=None))
    runner = make_server(ServerConfig(parallel=1, max_resident=1), model=bare, n_ctx=1024)
    props = httpx2.get(f"{runner.url}/props", timeout=30).json()
    assert props["chat_template_source"] == "builtin"
    assert props["chat_template_name"] == "chatml"  # the tiny vocabulary ends turns with <|im_end|>
    assert not props["model_has_chat_template"]
    assert "<|im_start|>" in props["chat_template"]  # the Jinja source in use, not ""
    prompt = httpx2.post(
        f"{runner.url}/apply-template",
        json={"messages": [{"role": "user", "content": "hi"}]},
        timeout=30,
    ).json()["prompt"]
    assert prompt.startswith("<|im_start|>user\nhi")


def test_tokenize_and_detokenize(http: httpx2.Client) -> None:
    tokens = http.post("/tokenize", json={"content": "hello world"}).json()["tokens"]
    assert tokens and all(isinstance(t, int) for t in tokens)
    with_bos = http.post("/tokenize", json={"content": "hello world", "add_special": True})
    assert len(with_bos.json()["tokens"]) == len(tokens) + 1
    pieces = http.post("/tokenize", json={"content": "hello world", "with_pieces": True}).json()
    assert [p["id"] for p in pieces["tokens"]] == tokens
    assert "".join(p["piece"] for p in pieces["tokens"]).strip() == "hello world"
    text = http.post("/detokenize", json={"tokens": tokens}).json()["content"]
    assert text.strip() == "hello world"


def test_apply_template(http: httpx2.Client) -> None:
    body = {
        "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "hello"},
        ]
    }
    prompt = http.post("/apply-template", json=body).json()["prompt"]
    assert prompt == (
        "<|im_start|>system\nbe brief<|im_end|>\n<|im_start|>user\nhello<|im_end|>\n"
        "<|im_start|>assistant\n"
    )


def test_slots_show_the_api_conversations(http: httpx2.Client) -> None:
    reply = http.post(
        "/v1/chat/completions",
        json={
            "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": 2,
            "conversation": "s",
        },
    )
    assert reply.status_code == 200
    slots = http.get("/slots").json()
    mine = [s for s in slots if s["conversation"] == "s"]
    assert mine and not mine[0]["is_processing"] and mine[0]["n_prompt_tokens"] > 0
    assert mine[0]["last_finish_reason"] == "length"
