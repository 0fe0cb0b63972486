"""Forced calls: llama.cpp's grammar sampler, given a family's call grammar, lets the model
write exactly the calls this family's parser reads, with arguments valid by the schema."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import jsonschema  # type: ignore[import-untyped]
import llama_cpp
import pytest

from app.engine.reasoning import ReasoningFormat
from app.engine.tool_calls import SYNTAXES, CallText, ToolCallFormat, new_parser, render_calls
from app.engine.tool_calls.grammar import ToolChoice, ToolGrammarError, call_grammar
from app.engine.tool_calls.specs import ToolSpec
from tests.tools.grammar_check import grammar_accepts

F = ToolCallFormat
WEATHER = ToolSpec(
    "get_weather",
    {
        "type": "object",
        "properties": {
            "city": {"type": "string"},
            "days": {"type": "integer"},
            "unit": {"type": "string", "enum": ["c", "f"]},
        },
        "required": ["city"],
    },
)
NOOP = ToolSpec("noop", {"type": "object", "properties": {}})
TOOLS = [WEATHER, NOOP]
FORCEABLE = list(F)


def _text(fmt: ToolCallFormat, *calls: CallText) -> str:
    return render_calls(SYNTAXES[fmt][0], list(calls))


@pytest.mark.timeout(120)
@pytest.mark.parametrize("fmt", FORCEABLE, ids=lambda f: f.value)
def test_the_grammar_accepts_the_call_and_the_parser_reads_it_valid(
    model: llama_cpp.llama_model_p, fmt: ToolCallFormat
) -> None:
    grammar = call_grammar(fmt, TOOLS).grammar
    call = CallText("get_weather", {"city": "Paris", "days": 3, "unit": "c"})
    text = _text(fmt, call)
    assert grammar_accepts(model, grammar, text)
    parser = new_parser(fmt)
    parser.feed(text)
    parser.finish()
    (parsed,) = parser.result().calls
    assert parsed.name == "get_weather"
    jsonschema.validate(parsed.arguments, WEATHER.parameters)
    assert grammar_accepts(model, grammar, _text(fmt, CallText("noop", {})))


@pytest.mark.timeout(120)
@pytest.mark.parametrize("fmt", FORCEABLE, ids=lambda f: f.value)
def test_the_grammar_refuses_what_breaks_the_schema(
    model: llama_cpp.llama_model_p, fmt: ToolCallFormat
) -> None:
    grammar = call_grammar(fmt, TOOLS).grammar
    assert not grammar_accepts(
        model, grammar, _text(fmt, CallText("get_wether", {"city": "Paris"}))
    )
    assert not grammar_accepts(model, grammar, _text(fmt, CallText("get_weather", {"days": 3})))
    assert not grammar_accepts(
        model, grammar, _text(fmt, CallText("get_weather", {"city": "P", "unit": "k"}))
    )
    assert not grammar_accepts(model, grammar, "Sure! " + _text(fmt, CallText("noop", {})))


@pytest.mark.timeout(120)
def test_a_named_choice_allows_that_function_only(model: llama_cpp.llama_model_p) -> None:
    grammar = call_grammar(F.HERMES, TOOLS, only="noop").grammar
    assert grammar_accepts(model, grammar, _text(F.HERMES, CallText("noop", {})))
    assert not grammar_accepts(
        model, grammar, _text(F.HERMES, CallText("get_weather", {"city": "Paris"}))
    )


@pytest.mark.timeout(120)
@pytest.mark.parametrize("fmt", [F.HERMES, F.MISTRAL_JSON, F.QWEN3_CODER], ids=lambda f: f.value)
def test_parallel_calls_only_when_asked(
    model: llama_cpp.llama_model_p, fmt: ToolCallFormat
) -> None:
    two = [CallText("noop", {}), CallText("get_weather", {"city": "Oslo"})]
    if SYNTAXES[fmt][0].section_open:
        text = _text(fmt, *two)
    else:
        text = _text(fmt, two[0]) + "\n" + _text(fmt, two[1])
    assert grammar_accepts(model, call_grammar(fmt, TOOLS, parallel=True).grammar, text)
    assert not grammar_accepts(model, call_grammar(fmt, TOOLS).grammar, text)


@pytest.mark.parametrize("fmt", FORCEABLE, ids=lambda f: f.value)
def test_auto_gives_a_lazy_grammar_that_starts_at_the_call(fmt: ToolCallFormat) -> None:
    lazy = call_grammar(fmt, TOOLS, ToolChoice.AUTO)
    assert lazy.lazy and lazy.grammar == call_grammar(fmt, TOOLS).grammar
    call = _text(fmt, CallText("noop", {}))
    reply = call if SYNTAXES[fmt][0].start_only else "Let me check.\n" + call
    (pattern,) = lazy.trigger_patterns
    match = re.search(pattern, reply)  # llama.cpp searches with std::regex (ECMAScript)
    assert match is not None and reply[match.start(1) :] == call


def test_schemas_that_cannot_be_enforced_are_sentences() -> None:
    bad = ToolSpec(
        "f", {"type": "object", "properties": {"s": {"type": "string", "maxLength": 10**6}}}
    )
    with pytest.raises(ToolGrammarError, match="The parameters of the tool 'f' cannot be enforced"):
        call_grammar(F.HERMES, [bad])
    with pytest.raises(
        ToolGrammarError, match="names the function 'nope', which is not among the tools"
    ):
        call_grammar(F.HERMES, TOOLS, only="nope")
    nested = ToolSpec("f", {"type": "object", "properties": {"o": {"type": "object"}}})
    for fmt, family in ((F.LFM2, "LFM2"), (F.GEMMA4, "Gemma 4")):
        with pytest.raises(ToolGrammarError) as caught:
            call_grammar(fmt, [nested])
        assert str(caught.value) == (
            f"Forced calls in {family}'s syntax take strings, numbers and booleans; a parameter of the tool 'f' "
            "is not one of them."
        )
    call_grammar(F.HERMES, [nested])  # JSON arguments take any schema
    with pytest.raises(ToolGrammarError, match="without tools"):
        call_grammar(F.HERMES, [])


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("fmt", "think", "opened", "reasoning"),
    [
        (F.HERMES, ReasoningFormat.THINK_TAGS, False, "<think>\nFirst the city.\n</think>\n\n"),
        (F.QWEN3_CODER, ReasoningFormat.THINK_TAGS, True, "The user wants Paris.\n</think>\n\n"),
        (F.MISTRAL_ARGS, ReasoningFormat.THINK_BRACKETS, False, "[THINK]Paris.[/THINK]"),
        (
            F.HARMONY,
            ReasoningFormat.HARMONY,
            False,
            "<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant",
        ),
    ],
    ids=lambda v: getattr(v, "value", None),
)
def test_a_forced_call_may_reason_first(
    model: llama_cpp.llama_model_p,
    fmt: ToolCallFormat,
    think: ReasoningFormat,
    opened: bool,
    reasoning: str,
) -> None:
    grammar = call_grammar(fmt, TOOLS, reasoning=think, starts_in_reasoning=opened).grammar
    call = _text(fmt, CallText("get_weather", {"city": "Paris"}))
    assert grammar_accepts(model, grammar, reasoning + call)
    assert grammar_accepts(model, grammar, call) is not opened, (
        "reasoning is optional unless the prompt opened it"
    )
    parser = new_parser(fmt, think, starts_in_reasoning=opened)
    parser.feed(reasoning + call)
    parser.finish()
    result = parser.result()
    assert [(c.name, c.arguments) for c in result.calls] == [("get_weather", {"city": "Paris"})]
    assert result.reasoning.strip() and result.reasoning.strip() in reasoning


def _grammar_start(pattern: str, reply: str) -> int | None:
    """Where llama.cpp starts the lazy grammar: the first non-empty capturing group."""
    match = re.search(pattern, reply)
    if match is None:
        return None
    return next(
        (match.start(g) for g in range(1, (match.lastindex or 0) + 1) if match.group(g)),
        match.start(),
    )


@pytest.mark.parametrize("opened", [False, True])
def test_a_lazy_grammar_does_not_start_inside_the_reasoning(opened: bool) -> None:
    lazy = call_grammar(
        F.HERMES,
        TOOLS,
        ToolChoice.AUTO,
        reasoning=ReasoningFormat.THINK_TAGS,
        starts_in_reasoning=opened,
    )
    (pattern,) = lazy.trigger_patterns
    call = _text(F.HERMES, CallText("noop", {}))
    thinking = "" if opened else "<think>\n"
    inside = thinking + "maybe <tool_call> is wrong here"
    assert _grammar_start(pattern, inside) is None
    reply = inside + "\n</think>\n\nSure. " + call
    assert _grammar_start(pattern, reply) == reply.index(call)
    if not opened:
        assert _grammar_start(pattern, "No thinking. " + call) == len("No thinking. ")


@pytest.mark.timeout(300)
def test_llama_cpp_builds_every_lazy_grammar_and_starts_it_at_the_call(tiny_model: Path) -> None:
    """In a child: an invalid trigger pattern would abort the process (std::regex throws)."""
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-m", "tests.tools.lazy_check", str(tiny_model)],
        capture_output=True,
        text=True,
        timeout=280,
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    results = json.loads(done.stdout.strip().splitlines()[-1])
    assert set(results) == {f.value for f in F}
    failing = {fmt: checks for fmt, checks in results.items() if not all(checks)}
    assert failing == {}
