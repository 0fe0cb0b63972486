"""A reasoning reply through the real engine: thinking and answer arrive apart.

A GBNF grammar from resources/grammars makes the random-weight model write a reply of the
reasoning shape, so the whole path (template, sampling, streaming split) is real.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from app.engine import Engine, SamplingParams, TokenText
from app.engine.chat_template import ReasoningOptions
from app.engine.reasoning import Channel, ReasoningFormat
from tests.support.gguf_models import TinySpec, write_tiny_model
from tests.support.settings import small_settings

ROOT = Path(__file__).resolve().parents[2]
QWEN3 = (ROOT / "tests/data/chat-templates/Qwen-Qwen3-0.6B.jinja").read_text()
QWEN35 = (ROOT / "tests/data/chat-templates/Qwen3.5-4B.jinja").read_text()


def grammar(name: str) -> str:
    return (ROOT / "resources/grammars" / f"{name}.gbnf").read_text()


@pytest.fixture(
    scope="module", params=[("qwen3", QWEN3), ("qwen35", QWEN35)], ids=["qwen3", "qwen3.5"]
)
def thinking_model(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    name, template = request.param
    return write_tiny_model(
        tmp_path_factory.mktemp("think") / f"{name}.gguf", TinySpec(chat_template=template)
    )


def test_reasoning_streams_apart_from_the_answer(thinking_model: Path) -> None:
    with Engine.open(thinking_model, small_settings(n_threads=1, n_threads_batch=1)) as engine:
        assert engine.template is not None
        assert engine.template.reasoning_format is ReasoningFormat.THINK_TAGS
        key = engine.open_sequence()
        engine.set_chat(key, [{"role": "user", "content": "hello world"}])
        opened = engine.template.opens_reasoning()
        shape = "open-think-answer" if opened else "think-then-answer"
        events: list[TokenText] = []
        completion = engine.complete(
            key,
            SamplingParams(temperature=0, max_tokens=80, grammar=grammar(shape)),
            on_event=lambda e: events.append(e) if isinstance(e, TokenText) else None,
        )
        assert completion.finish_reason == "eog"
        words = completion.reasoning.split()
        assert 3 <= len(words) <= 7 and completion.text.split()
        assert "<think>" not in completion.text + completion.reasoning
        assert "</think>" not in completion.text + completion.reasoning
        assert completion.reasoning_ms is not None and completion.reasoning_ms >= 0
        channels = [e.channel for e in events if e.text]
        # All of the reasoning comes first, then all of the answer.
        first_answer = channels.index(Channel.ANSWER)
        assert set(channels[:first_answer]) == {Channel.REASONING}
        assert set(channels[first_answer:]) == {Channel.ANSWER}
        assert "".join(e.text for e in events if e.channel is Channel.ANSWER) == completion.text


def test_thinking_off_changes_the_prompt_and_past_reasoning_reaches_the_template(
    thinking_model: Path,
) -> None:
    with Engine.open(thinking_model, small_settings(n_threads=1, n_threads_batch=1)) as engine:
        assert engine.template is not None
        user = [{"role": "user", "content": "hello world"}]
        on = engine.render_chat(user)
        off = engine.render_chat(user, reasoning=ReasoningOptions(enable_thinking=False))
        assert on != off and engine.template.supports_thinking_toggle
        key = engine.open_sequence()
        engine.set_chat(key, user, reasoning=ReasoningOptions(enable_thinking=False))
        completion = engine.complete(
            key, SamplingParams(temperature=0, max_tokens=40, grammar=grammar("answer-only"))
        )
        assert completion.reasoning == "" and completion.text.strip()
