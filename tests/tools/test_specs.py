"""A request's tools: malformed ones are sentences; a call's arguments are checked
against the tool's schema with a sentence the model can act on."""

from __future__ import annotations

from typing import Any

import pytest

from app.engine.tool_calls import ToolSpec, ToolSpecError, check_arguments, tool_specs

WEATHER: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "days": {"type": "integer", "minimum": 1}},
            "required": ["city"],
        },
    },
}


def test_openai_tools_become_specs() -> None:
    bare = {"type": "function", "function": {"name": "now"}}
    (weather, now) = tool_specs([WEATHER, bare])
    assert weather == ToolSpec("get_weather", WEATHER["function"]["parameters"], "Weather.")
    assert now.parameters == {"type": "object", "properties": {}}


@pytest.mark.parametrize(
    ("tools", "sentence"),
    [
        ({"name": "x"}, "tools must be a list of function tools."),
        (["x"], "tools[0] must be an object of type 'function'."),
        ([{"type": "function"}], "tools[0] has no 'function' object."),
        (
            [{"type": "function", "function": {"name": "bad name"}}],
            "tools[0].function.name must be 1 to 64",
        ),
        (
            [{"type": "function", "function": {"name": "f", "parameters": {"type": "string"}}}],
            "tools[0].function.parameters must be a JSON schema of type 'object'.",
        ),
        (
            [
                {
                    "type": "function",
                    "function": {"name": "f", "parameters": {"type": "object", "required": 3}},
                }
            ],
            "tools[0].function.parameters is not a valid JSON schema: 3 is not of type 'array'.",
        ),
        ([WEATHER, WEATHER], "Two tools are named 'get_weather'; each needs its own name."),
    ],
)
def test_malformed_tools_are_sentences(tools: Any, sentence: str) -> None:
    with pytest.raises(ToolSpecError) as caught:
        tool_specs(tools)
    assert str(caught.value).startswith(sentence)


def test_arguments_are_checked_against_the_schema() -> None:
    (spec,) = tool_specs([WEATHER])
    assert check_arguments(spec, {"city": "Paris", "days": 2}) is None
    assert check_arguments(spec, {"days": 2}) == (
        "The arguments of the call to 'get_weather' do not fit its schema: 'city' is a required property."
    )
    assert check_arguments(spec, {"city": "Paris", "days": 0}) == (
        "The arguments of the call to 'get_weather' do not fit its schema at ['days']: "
        "0 is less than the minimum of 1."
    )


def test_the_generic_description_s_example_is_what_the_generic_parser_reads() -> None:
    from app.engine.tool_calls import ToolCallFormat, new_parser
    from app.engine.tool_calls.generic import generic_tools_prompt

    (spec,) = tool_specs([WEATHER])
    prompt = generic_tools_prompt([spec])
    assert '"name": "get_weather"' in prompt and '"required": [' in prompt
    example = prompt.split("several calls go in the list):\n", 1)[1].split("\n", 1)[0]
    parser = new_parser(ToolCallFormat.GENERIC)
    parser.feed(example)
    parser.finish()
    assert [(c.name, c.arguments) for c in parser.result().calls] == [
        ("get_weather", {"argument": "value"})
    ]
