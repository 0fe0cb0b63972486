"""The thinking default: one rule, llama-server's (app/engine/chat_template/thinking.py).

Every template of tests/data/chat-templates is rendered with the default choice and checked
against what the rule says; the splitter is checked on a sample reply of every format the
rule turns thinking on for.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from app.engine.chat_template import ChatTemplate, ReasoningDefaults, ReasoningOptions
from app.engine.chat_template.thinking import llama_server_handler
from app.engine.reasoning import (
    Channel,
    ReasoningFormat,
    ReasoningSplitter,
    format_markers,
    merge_pieces,
    split_reasoning,
)

TEMPLATES_DIR = Path(__file__).resolve().parents[1] / "data" / "chat-templates"
USER_ONLY = [{"role": "user", "content": "USER-one asks a question?"}]
ON = ReasoningOptions(enable_thinking=True)
OFF = ReasoningOptions(enable_thinking=False)

# The templates with a reasoning format whose default render passes enable_thinking=false:
# llama-server's template analysis finds no reasoning markers in them (Apertus writes its
# thoughts as content blocks, Solar Open and Apriel 1.5 show no past reasoning and do not
# switch the end of their generation prompt).
RULE_OFF_WITH_A_FORMAT = {"Apertus-8B-Instruct", "upstage-Solar-Open-100B", "unsloth-Apriel-1.5"}
# Rule on, but the template's own switch defaults to no thinking (it ignores
# enable_thinking): Hy3's reasoning_effort is "no_think", Granite 3.3 reads `thinking`.
OWN_DEFAULT_OFF = {"tencent-Hy3", "ibm-granite-granite-3.3-2B-Instruct"}
# Reasoning variables other than enable_thinking: set only by an explicit choice.
OTHER_SWITCHES = ("thinking", "thinking_mode", "reasoning", "thinking_budget", "reasoning_effort")


def _files() -> list[Any]:
    return [pytest.param(p, id=p.stem) for p in sorted(TEMPLATES_DIR.glob("*.jinja"))]


def _template(path: Path) -> ChatTemplate:
    return ChatTemplate(path.read_text(encoding="utf-8"), "<BOS>", "<EOS>")


@pytest.mark.parametrize("path", _files())
def test_default_render_follows_the_rule(path: Path) -> None:
    template = _template(path)
    defaults = template.reasoning_defaults
    assert isinstance(defaults, ReasoningDefaults)
    assert defaults.format is template.reasoning_format
    has_format = defaults.format is not ReasoningFormat.NONE
    expected_rule = has_format and path.stem not in RULE_OFF_WITH_A_FORMAT
    assert defaults.thinking_enabled_by_rule is expected_rule
    assert defaults.thinking_by_default is (expected_rule and path.stem not in OWN_DEFAULT_OFF)
    default = template.render(USER_ONLY)
    # The default passes enable_thinking per the rule and nothing else: a template that
    # reads no other switch renders as the explicit choice of the same value.
    source = template.source
    if not any(f"{name} " in source or f"{name})" in source for name in OTHER_SWITCHES):
        assert default == template.render(USER_ONLY, reasoning=ON if expected_rule else OFF)
    if defaults.thinking_by_default and template.supports_thinking_toggle:
        assert default != template.render(USER_ONLY, reasoning=OFF)
    handler = llama_server_handler(source)
    if handler is not None and has_format:
        assert defaults.thinking_enabled_by_rule is handler[1]


def test_the_five_templates_that_differed_from_llama_server() -> None:
    def render(name: str, options: ReasoningOptions | None = None) -> str:
        return _template(TEMPLATES_DIR / f"{name}.jinja").render(USER_ONLY, reasoning=options)

    # Apertus: no reasoning markers llama-server's parser knows, so enable_thinking=false.
    assert "Deliberation: disabled" in render("Apertus-8B-Instruct")
    assert "Deliberation: enabled" in render("Apertus-8B-Instruct", ON)
    # Hy3: reasoning_effort is left to the template (no_think), as llama-server leaves it.
    assert "reasoning_effort:no_think" in render("tencent-Hy3")
    assert "reasoning_effort:high" in render("tencent-Hy3", ON)
    # MiniMax-M3: thinking_mode unset (the template's adaptive mode), the prompt opens nothing.
    m3 = render("MiniMax-M3")
    assert "Current thinking mode: adaptive" in m3 and m3.endswith("ai\n")
    assert render("MiniMax-M3", ON).endswith("<mm:think>")
    # DeepSeek V4: `thinking` follows enable_thinking inside the template (true by the rule).
    for name in ("deepseek-ai-DeepSeek-V4", "deepseek-ai-DeepSeek-V4-Flash-0731"):
        assert render(name).endswith("<｜Assistant｜><think>")
        assert render(name, OFF).endswith("<｜Assistant｜></think>")


def _sample_reply(fmt: ReasoningFormat, opened: bool) -> str:
    """A reply in ``fmt`` with reasoning "REASONING-y" and answer "ANSWER-x"."""
    if fmt is ReasoningFormat.HARMONY:
        head = "" if opened else "<|channel|>analysis<|message|>"
        return f"{head}REASONING-y<|end|><|start|>assistant<|channel|>final<|message|>ANSWER-x"
    if fmt is ReasoningFormat.GLIMMER:
        head = "" if opened else "<|start|>assistant to=self<|message|>"
        return f"{head}REASONING-y<|eom|><|start|>assistant to=user<|message|>ANSWER-x"
    opens, closes = format_markers(fmt)
    return f"{'' if opened else opens[0]}REASONING-y{closes[0]}ANSWER-x"


@pytest.mark.parametrize("path", _files())
def test_the_splitter_handles_every_template_the_rule_turns_on(path: Path) -> None:
    template = _template(path)
    if not template.reasoning_defaults.thinking_enabled_by_rule:
        pytest.skip("thinking is off by default for this template")
    fmt = template.reasoning_format
    for options in (None, ON):
        opened = template.opens_reasoning(options)
        reply = _sample_reply(fmt, opened)
        assert split_reasoning(reply, fmt, opened) == ("REASONING-y", "ANSWER-x")
        splitter = ReasoningSplitter(fmt, opened)
        pieces = [p for i in range(0, len(reply), 3) for p in splitter.feed(reply[i : i + 3])]
        pieces = merge_pieces([*pieces, *splitter.flush()])
        assert [(p.channel, p.text) for p in pieces] == [
            (Channel.REASONING, "REASONING-y"),
            (Channel.ANSWER, "ANSWER-x"),
        ]


def test_reasoning_defaults_are_plain_data() -> None:
    defaults = _template(TEMPLATES_DIR / "Qwen-Qwen3-0.6B.jinja").reasoning_defaults
    assert defaults.to_dict() == {
        "format": "think_tags",
        "thinking_enabled_by_rule": True,
        "thinking_by_default": True,
        "supports_thinking_toggle": True,
        "supports_effort": False,
        "rule": "llama-server",
    }
