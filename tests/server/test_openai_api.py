"""The server through the official ``openai`` client (a client no one here wrote)."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import httpx2
import openai
import pytest

from app.server import ServerConfig, ServerRunner
from tests.server.conftest import ROOT, MakeServer, wait_for
from tests.support.gguf_models import TinySpec, write_tiny_model

# llama-server's grammar extension: words forever (the reply ends with the context)
ENDLESS = 'root ::= ("hello" | " world" | " tab" | " llama") root'


def user(text: str) -> list[Any]:
    return [{"role": "user", "content": text}]


def stream_text(client: openai.OpenAI, prompt: str, max_tokens: int) -> str:
    stream = client.chat.completions.create(
        model="tiny-8k",
        messages=user(prompt),
        max_tokens=max_tokens,
        temperature=0,
        stream=True,
    )
    return "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)


def test_models_lists_the_loaded_model(client: openai.OpenAI) -> None:
    models = client.models.list().data
    assert [m.id for m in models] == ["tiny-8k"]
    assert client.models.retrieve("tiny-8k").id == "tiny-8k"


def test_chat_without_and_with_streaming_gives_the_same_greedy_reply(
    client: openai.OpenAI,
) -> None:
    reply = client.chat.completions.create(
        model="tiny-8k",
        messages=[
            {"role": "system", "content": "you are a llama"},
            {"role": "user", "content": "hello world"},
        ],
        max_tokens=12,
        temperature=0,
    )
    choice = reply.choices[0]
    assert choice.finish_reason == "length"
    assert choice.message.role == "assistant"
    assert choice.message.content
    assert reply.usage is not None
    assert reply.usage.completion_tokens == 12
    assert reply.usage.prompt_tokens > 5

    stream = client.chat.completions.create(
        model="tiny-8k",
        messages=[
            {"role": "system", "content": "you are a llama"},
            {"role": "user", "content": "hello world"},
        ],
        max_tokens=12,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == choice.message.content
    reasons = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert reasons[-1] == "length"
    assert chunks[-1].choices == []
    usage = chunks[-1].usage
    assert usage is not None and usage.completion_tokens == 12
    assert usage.prompt_tokens == reply.usage.prompt_tokens


def test_stop_strings_and_sampling_parameters(client: openai.OpenAI) -> None:
    free = client.chat.completions.create(
        model="tiny-8k", messages=user("one two"), max_tokens=16, temperature=0
    )
    text = free.choices[0].message.content or ""
    assert len(text) > 3
    stop = text[2:4]
    cut = client.chat.completions.create(
        model="tiny-8k", messages=user("one two"), max_tokens=16, temperature=0, stop=[stop]
    )
    assert cut.choices[0].finish_reason == "stop"
    assert cut.choices[0].message.content == text[: text.index(stop)]
    seeded = [
        client.chat.completions.create(
            model="tiny-8k",
            messages=user("one two"),
            max_tokens=16,
            temperature=1.0,
            top_p=0.9,
            seed=42,
            presence_penalty=0.5,
            frequency_penalty=0.2,
            extra_body={"top_k": 20, "min_p": 0.01, "repeat_penalty": 1.1},
        )
        .choices[0]
        .message.content
        for _ in range(2)
    ]
    assert seeded[0] == seeded[1]


def test_completions_with_and_without_streaming(client: openai.OpenAI) -> None:
    whole = client.completions.create(
        model="tiny-8k", prompt="the llama is", max_tokens=10, temperature=0
    )
    assert whole.choices[0].finish_reason == "length"
    assert whole.usage is not None and whole.usage.completion_tokens == 10
    stream = client.completions.create(
        model="tiny-8k", prompt="the llama is", max_tokens=10, temperature=0, stream=True
    )
    assert "".join(c.choices[0].text for c in stream if c.choices) == whole.choices[0].text


def test_a_json_schema_reply_parses(client: openai.OpenAI) -> None:
    schema = {
        "type": "object",
        "properties": {
            "answer": {"type": "string", "enum": ["yes", "no", "maybe"]},
            "count": {"type": "integer", "minimum": 0, "maximum": 99},
            "ok": {"type": "boolean"},
            "name": {"type": "string", "maxLength": 6},
        },
        "required": ["answer", "count", "ok", "name"],
        "additionalProperties": False,
    }
    for seed in (1, 2, 3):
        reply = client.chat.completions.create(
            model="tiny-8k",
            messages=user("give me json"),
            max_tokens=200,
            temperature=0.8,
            seed=seed,
            response_format={
                "type": "json_schema",
                "json_schema": {"name": "reply", "schema": schema, "strict": True},
            },
        )
        assert reply.choices[0].finish_reason == "stop"
        data = json.loads(reply.choices[0].message.content or "")
        assert set(data) == {"answer", "count", "ok", "name"}
        assert data["answer"] in ("yes", "no", "maybe")
        assert isinstance(data["ok"], bool)
        assert isinstance(data["count"], int)


def test_eight_concurrent_streams_each_get_their_greedy_tokens(client: openai.OpenAI) -> None:
    prompts = [f"client {i} says hello to the llama" for i in range(8)]
    alone = [stream_text(client, p, 24) for p in prompts]
    together: list[str | None] = [None] * 8
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            together[i] = stream_text(client, prompts[i], 24)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors
    assert together == alone


def slots(server: ServerRunner) -> list[dict[str, Any]]:
    reply = httpx2.get(f"{server.url}/slots", timeout=10)
    result: list[dict[str, Any]] = reply.json()
    return result


def test_a_client_that_disconnects_mid_stream_frees_its_slot(
    client: openai.OpenAI, server: ServerRunner
) -> None:
    with httpx2.Client(timeout=30) as raw:
        body = {
            "messages": user("talk forever"),
            "grammar": ENDLESS,
            "temperature": 0.8,
            "seed": 3,
            "stream": True,
            "conversation": "disconnect-test",
        }
        with raw.stream("POST", f"{server.url}/v1/chat/completions", json=body) as response:
            assert response.status_code == 200
            lines = response.iter_lines()
            got = [next(lines) for _ in range(6)]
            assert any(line.startswith("data: ") for line in got)
            mine = [s for s in slots(server) if s["conversation"] == "disconnect-test"]
            assert mine and mine[0]["is_processing"]
    # closed: the server notices within a step, stops the turn and frees the slot
    assert wait_for(
        lambda: any(
            s["conversation"] == "disconnect-test"
            and not s["is_processing"]
            and s["last_finish_reason"] == "aborted"
            for s in slots(server)
        ),
        5.0,
    ), slots(server)
    records = [r for r in server.service.log if r.conversation == "disconnect-test"]
    assert records[-1].status == 499  # the request log says the client went away
    # and the conversation serves the next request at once
    reply = client.chat.completions.create(
        model="tiny-8k",
        messages=user("again"),
        max_tokens=4,
        temperature=0,
        extra_body={"conversation": "disconnect-test"},
    )
    assert reply.choices[0].message.content is not None


def test_a_resent_chat_decodes_only_its_new_part(
    client: openai.OpenAI, server: ServerRunner
) -> None:
    for conversation in ("warm-named", None):
        extra = {"conversation": conversation} if conversation else {}
        history: list[Any] = user(f"the cache of {conversation} is warm " * 20)
        first = client.chat.completions.create(
            model="tiny-8k", messages=history, max_tokens=8, temperature=0, extra_body=extra
        )
        assert first.usage is not None
        history += [
            {"role": "assistant", "content": first.choices[0].message.content},
            {"role": "user", "content": "and then what"},
        ]
        second = client.chat.completions.create(
            model="tiny-8k", messages=history, max_tokens=8, temperature=0, extra_body=extra
        )
        usage = second.usage
        assert usage is not None and usage.prompt_tokens_details is not None
        cached = usage.prompt_tokens_details.cached_tokens or 0
        assert cached >= first.usage.prompt_tokens
        new_part = usage.prompt_tokens - first.usage.prompt_tokens
        timings: dict[str, Any] = second.model_extra["timings"]  # type: ignore[index]
        assert timings["prompt_n"] == usage.prompt_tokens - cached
        assert timings["prompt_n"] <= new_part
    records = [r for r in server.service.log if r.conversation == "warm-named"]
    assert records[-1].status == 200 and records[-1].cached_tokens > 0


def test_the_conversation_header_names_a_conversation(
    client: openai.OpenAI, server: ServerRunner
) -> None:
    client.chat.completions.create(
        model="tiny-8k",
        messages=user("from a header"),
        max_tokens=3,
        temperature=0,
        extra_headers={"X-Conversation-Id": "header-conv"},
    )
    assert any(s["conversation"] == "header-conv" for s in slots(server))


def test_embeddings(make_server: MakeServer) -> None:
    # n_seq_max 4: the engine aborts on embeddings when n_seq_max does not divide n_ubatch
    runner = make_server(
        ServerConfig(parallel=2, max_resident=2), embeddings=True, pooling_type="mean"
    )
    client = openai.OpenAI(base_url=f"{runner.url}/v1", api_key="x", max_retries=0)
    result = client.embeddings.create(model="tiny-8k", input=["hello world", "the llama"])
    assert [d.index for d in result.data] == [0, 1]
    vectors = [d.embedding for d in result.data]
    assert all(len(v) == 64 for v in vectors)
    assert all(abs(sum(x * x for x in v) - 1.0) < 1e-3 for v in vectors)
    assert vectors[0] != vectors[1]
    assert result.usage.prompt_tokens > 0
    again = client.embeddings.create(model="tiny-8k", input="hello world", encoding_format="float")
    assert again.data[0].embedding == pytest.approx(vectors[0], abs=1e-5)


def test_reasoning_content(make_server: MakeServer, tmp_path: Path) -> None:
    template = (ROOT / "tests/data/chat-templates/Qwen-Qwen3-0.6B.jinja").read_text()
    model = write_tiny_model(tmp_path / "think.gguf", TinySpec(chat_template=template))
    runner = make_server(ServerConfig(parallel=1), model=model, n_ctx=2048)
    client = openai.OpenAI(base_url=f"{runner.url}/v1", api_key="x", max_retries=0)
    for shape in ("open-think-answer", "think-then-answer"):
        grammar = (ROOT / "resources/grammars" / f"{shape}.gbnf").read_text()
        args: dict[str, Any] = {
            "model": "think",
            "messages": user("hello world"),
            "max_tokens": 80,
            "temperature": 0,
            "extra_body": {"grammar": grammar},
        }
        reply = client.chat.completions.create(**args)
        message = reply.choices[0].message
        reasoning = (message.model_extra or {}).get("reasoning_content", "")
        if not reasoning:
            continue  # this template does not open the thinking: the other shape does
        assert message.content and "</think>" not in message.content
        chunks = list(client.chat.completions.create(stream=True, **args))
        deltas = [c.choices[0].delta for c in chunks if c.choices]
        streamed = "".join((d.model_extra or {}).get("reasoning_content") or "" for d in deltas)
        assert streamed == reasoning
        assert "".join(d.content or "" for d in deltas) == message.content
        return
    raise AssertionError("no grammar gave a reasoning reply")


def readme_client_example() -> str:
    """The first Python block of the README's "Local API server" section."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Local API server", 1)[1]
    return section.split("```python\n", 1)[1].split("```", 1)[0]


def test_the_readmes_client_example_runs(
    make_server: MakeServer, capsys: pytest.CaptureFixture[str]
) -> None:
    code = readme_client_example()
    assert 'model="local"' in code and "http://127.0.0.1:8080/v1" in code
    # A small context: the example sets no max_tokens, so the reply ends with the context.
    runner = make_server(ServerConfig(parallel=1, max_resident=1), n_ctx=512)
    exec(compile(code.replace("http://127.0.0.1:8080", runner.url), "README.md", "exec"), {})
    printed = capsys.readouterr().out
    assert printed not in ("", "\n", "None\n")  # the reply's text
    assert runner.service.store is not None
    assert "my-agent" in runner.service.store.names()  # the conversation it named
