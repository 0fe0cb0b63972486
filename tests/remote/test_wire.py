"""The request a remote turn sends and the chunks it reads, per server kind; and the
layers: the remote engine is free of Qt, llama.cpp and the database."""

from __future__ import annotations

import ast
from pathlib import Path

from app.engine import SamplingParams
from app.engine.chat_template import ReasoningOptions
from app.remote.probe import ServerKind, ServerTraits
from app.remote.wire import Chunk, chat_body, read_chunk
from app.session import ChatMessage
from app.session.engine_port import ChatPrompt

APP = Path(__file__).resolve().parents[2] / "app"
PROMPT = ChatPrompt((ChatMessage("user", "hi"),), system="Be brief.")


def traits(kind: ServerKind, slots: int = 0) -> ServerTraits:
    return ServerTraits(kind=kind, models=("m",), model="m", total_slots=slots)


def test_llama_server_gets_its_cache_fields_and_a_slot() -> None:
    body = chat_body(traits(ServerKind.LLAMA_SERVER, 4), PROMPT, SamplingParams(max_tokens=5), 2)
    assert body["messages"][0] == {"role": "system", "content": "Be brief."}
    assert body["cache_prompt"] is True and body["id_slot"] == 2
    assert body["return_progress"] is True and body["max_tokens"] == 5
    assert body["stream_options"] == {"include_usage": True}


def test_llamadesk_gets_cache_prompt_but_no_slot() -> None:
    body = chat_body(traits(ServerKind.LLAMADESK, 4), PROMPT, SamplingParams(), 1)
    assert body["cache_prompt"] is True
    assert "id_slot" not in body and "return_progress" not in body


def test_thinking_off_is_sent_as_template_kwargs() -> None:
    prompt = ChatPrompt(PROMPT.messages, reasoning=ReasoningOptions(enable_thinking=False))
    body = chat_body(traits(ServerKind.OPENAI), prompt, SamplingParams(), None)
    assert body["chat_template_kwargs"] == {"enable_thinking": False}
    # no choice made: the server applies the model's default
    assert "chat_template_kwargs" not in chat_body(
        traits(ServerKind.OPENAI), PROMPT, SamplingParams(), None
    )


def test_llama_server_chunks() -> None:
    progress = read_chunk(
        {"choices": [], "prompt_progress": {"total": 100, "cache": 60, "processed": 80}}
    )
    assert progress is not None and progress.progress == (80, 100)
    thought = read_chunk({"choices": [{"delta": {"reasoning_content": "hmm"}}]})
    assert thought == Chunk(reasoning="hmm")
    final = read_chunk(
        {
            "choices": [{"delta": {}, "finish_reason": "length"}],
            "timings": {"cache_n": 60, "prompt_n": 40, "prompt_ms": 12.5, "predicted_n": 8},
        }
    )
    assert final is not None and final.finish_reason == "length"
    assert final.figures is not None
    assert (final.figures.n_prompt, final.figures.n_cached) == (100, 60)
    assert final.figures.prompt_ms == 12.5


def test_usage_and_errors_in_the_stream() -> None:
    usage = read_chunk(
        {
            "choices": [],
            "usage": {
                "prompt_tokens": 50,
                "completion_tokens": 5,
                "prompt_tokens_details": {"cached_tokens": 32},
            },
        }
    )
    assert usage is not None and usage.figures is not None
    assert (usage.figures.n_prompt, usage.figures.n_cached, usage.figures.n_generated) == (
        50,
        32,
        5,
    )
    plain = read_chunk({"choices": [], "usage": {"prompt_tokens": 50, "completion_tokens": 5}})
    assert plain is not None and plain.figures is not None and plain.figures.n_cached is None
    error = read_chunk({"error": {"message": "out of memory"}})
    assert error is not None and error.error == "out of memory"
    assert read_chunk([1, 2]) is None and read_chunk({"choices": "x"}) is None


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_the_remote_engine_is_free_of_qt_llama_cpp_and_storage() -> None:
    banned = ("llama_cpp", "PySide6", "app.ui", "app.storage")
    files = sorted((APP / "remote").glob("*.py"))
    assert files
    wrong = [
        f"{path.name} imports {name}"
        for path in files
        for name in _imports(path)
        if any(name == b or name.startswith(b + ".") for b in banned)
    ]
    assert not wrong
