"""Run in a child process by test_grammar.py: every family's lazy grammar, built by
llama.cpp from its trigger patterns, lets a reply with text (and reasoning) before a call
through, and refuses a wrong call after the trigger. Prints one JSON object."""

from __future__ import annotations

import json
import sys

import llama_cpp

from app.engine.reasoning import ReasoningFormat
from app.engine.tool_calls import SYNTAXES, CallText, ToolCallFormat, render_calls
from app.engine.tool_calls.grammar import ToolChoice, call_grammar
from app.engine.tool_calls.specs import ToolSpec
from tests.tools.grammar_check import lazy_grammar_accepts

TOOLS = [
    ToolSpec(
        "get_weather",
        {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    )
]


def main(model_path: str) -> None:
    model = llama_cpp.llama_model_load_from_file(
        model_path.encode(), llama_cpp.llama_model_default_params()
    )
    assert model
    out: dict[str, list[bool]] = {}
    for fmt in ToolCallFormat:
        syntax = SYNTAXES[fmt][0]
        good = render_calls(syntax, [CallText("get_weather", {"city": "Paris"})])
        bad = render_calls(syntax, [CallText("get_weathr", {"city": "Paris"})])
        lead = "" if syntax.start_only else "Let me check.\n"
        think = (
            ReasoningFormat.HARMONY if fmt is ToolCallFormat.HARMONY else ReasoningFormat.THINK_TAGS
        )
        lazy = call_grammar(fmt, TOOLS, ToolChoice.AUTO, reasoning=think)
        thought = "" if syntax.start_only or fmt is ToolCallFormat.HARMONY else "<think>x</think>\n"
        out[fmt.value] = [
            lazy_grammar_accepts(model, lazy.grammar, lazy.trigger_patterns, thought + lead + good),
            not lazy_grammar_accepts(
                model, lazy.grammar, lazy.trigger_patterns, thought + lead + bad
            ),
            lazy_grammar_accepts(
                model, lazy.grammar, lazy.trigger_patterns, thought + "No call at all."
            ),
        ]
    llama_cpp.llama_model_free(model)
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1])
