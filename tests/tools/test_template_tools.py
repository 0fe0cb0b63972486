"""Tools and tool-call history render in every template of the test data: the template's
own way where it knows a family, the generic JSON form otherwise; a call with no text
(``content`` None) renders everywhere, and each family reads back the call its template
wrote from the app's own message shape."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.engine.chat_template import ChatTemplate
from app.engine.reasoning import ReasoningFormat
from app.engine.tool_calls import (
    ToolCallFormat,
    ToolSpec,
    detect_tool_format,
    new_parser,
)
from app.messages import ChatMessage, MessageToolCall

TEMPLATES = Path(__file__).resolve().parents[1] / "data" / "chat-templates"
TOOL = ToolSpec(
    "get_weather",
    {
        "type": "object",
        "properties": {
            # (Command R+'s template needs every parameter described)
            "city": {"type": "string", "description": "The city."},
            "days": {"type": "integer", "description": "How many days."},
        },
        "required": ["city"],
    },
    "The weather in a city.",
)
ARGS = {"city": "Paris", "days": 3}
CALL = MessageToolCall("abcdefghi", "get_weather", json.dumps(ARGS))


def _names() -> list[str]:
    return sorted(p.stem for p in TEMPLATES.glob("*.jinja"))


def _template(name: str) -> ChatTemplate:
    return ChatTemplate((TEMPLATES / f"{name}.jinja").read_text(), "<s>", "</s>")


def _history(content: str = "") -> list[dict[str, object]]:
    messages = [
        ChatMessage("user", "USERTEXT"),
        ChatMessage("assistant", content, tool_calls=(CALL,)),
        ChatMessage("tool", "RESULTTEXT", tool_call_id="abcdefghi", name="get_weather"),
    ]
    return [m.to_engine() for m in messages]


@pytest.mark.parametrize("name", _names())
def test_tools_and_a_past_call_render(name: str) -> None:
    template = _template(name)
    text = template.render(_history(), add_generation_prompt=True, tool_specs=[TOOL])
    assert "USERTEXT" in text and "RESULTTEXT" in text
    # The tool is offered (its description or its name), and the past call shows.
    assert "get_weather" in text
    assert "Paris" in text
    caps = template.tool_caps
    assert caps.fmt is detect_tool_format(template.source)
    if not caps.lists_tools:  # described in the system message
        assert "You can use these tools" in text


@pytest.mark.parametrize("name", _names())
def test_a_call_with_text_renders_too(name: str) -> None:
    template = _template(name)
    text = template.render(_history("Let me look."), add_generation_prompt=True, tool_specs=[TOOL])
    assert "RESULTTEXT" in text and "Paris" in text


def test_the_render_is_the_same_each_time() -> None:
    """The cache is reused by prefix: the same history and tools give the same text."""
    for name in ("Qwen-Qwen3-0.6B", "meta-llama-Llama-3.1-8B-Instruct", "google-gemma-2-2b-it"):
        template = _template(name)
        first = template.render(_history(), tool_specs=[TOOL])
        assert template.render(_history(), tool_specs=[TOOL]) == first


def test_a_template_without_tools_gets_the_generic_form_and_reads_it_back() -> None:
    template = _template("google-gemma-2-2b-it")
    assert not template.tool_caps.lists_tools
    text = template.render(_history(), add_generation_prompt=False, tool_specs=[TOOL])
    assert '"tool_response"' in text
    written = text[text.index("USERTEXT") + len("USERTEXT") : text.index("tool_response")]
    parser = new_parser(ToolCallFormat.GENERIC, ReasoningFormat.NONE)
    parser.feed(written.split("model\n", 1)[1])
    parser.finish()
    assert [(c.name, c.arguments) for c in parser.result().calls] == [("get_weather", ARGS)]


@pytest.mark.parametrize("name", _names())
def test_the_family_reads_back_the_call_the_history_shows(name: str) -> None:
    """What the model is shown of its past call is what its parser reads: a call (to the
    right function, with the arguments) — the template's own rendering, or the call
    written in the family's syntax where the template shows none."""
    template = _template(name)
    caps = template.tool_caps
    text = template.render(_history(), add_generation_prompt=False, tool_specs=[TOOL])
    shown = text[text.index("USERTEXT") + len("USERTEXT") : text.index("RESULTTEXT")]
    if caps.fmt is ToolCallFormat.LLAMA3_JSON:  # a bare JSON call counts only at the start
        shown = shown.split("assistant<|end_header_id|>", 1)[1]
    if caps.fmt is ToolCallFormat.GENERIC:
        shown = shown[shown.index('{"tool_calls"') :]
    reasoning = (
        ReasoningFormat.HARMONY if caps.fmt is ToolCallFormat.HARMONY else ReasoningFormat.NONE
    )
    parser = new_parser(caps.fmt, reasoning)
    parser.feed(shown)
    parser.finish()
    assert [(c.name, c.arguments) for c in parser.result().calls] == [("get_weather", ARGS)], shown
