"""Tools whose parameters use ``$ref``/``$defs`` (pydantic models: the MCP SDK's tools,
``openai.pydantic_function_tool``): the call grammar resolves them wherever it nests the
parameters, in every family, for required and auto, and llama.cpp's grammar sampler lets
the model write exactly the schema-valid calls (issue 27, item 7)."""

from __future__ import annotations

import enum
from typing import Any

import jsonschema  # type: ignore[import-untyped]
import llama_cpp
import openai
import pydantic
import pytest

from app.engine.tool_calls import SYNTAXES, CallText, ToolCallFormat, new_parser, render_calls
from app.engine.tool_calls.grammar import ToolChoice, ToolGrammarError, call_grammar
from app.engine.tool_calls.schema_refs import SchemaRefError, local_schema
from app.engine.tool_calls.specs import ToolSpec, tool_specs
from tests.tools.grammar_check import grammar_accepts

F = ToolCallFormat
# The two families whose call syntax has no JSON (LFM2, Gemma 4) take scalars only.
FLAT = {F.LFM2, F.GEMMA4}
# Sorted out here: inside parametrize's arguments mypy would infer the members as object.
JSON_FAMILIES = sorted(set(F) - FLAT, key=lambda f: f.value)
ALL_FAMILIES = sorted(F, key=lambda f: f.value)


class Unit(enum.Enum):
    CELSIUS = "c"
    FAHRENHEIT = "f"


class Person(pydantic.BaseModel):
    name: str
    age: int


class Meeting(pydantic.BaseModel):
    """A model parameter, a list of them, an optional one and an enum class: four refs."""

    people: list[Person]
    unit: Unit
    host: Person | None = None


class Forecast(pydantic.BaseModel):
    """Scalars and an enum class (a ref): what every family can force."""

    city: str
    unit: Unit


MEETING: ToolSpec = tool_specs([openai.pydantic_function_tool(Meeting)])[0]
FORECAST: ToolSpec = tool_specs([openai.pydantic_function_tool(Forecast)])[0]
GOOD_MEETING: dict[str, Any] = {
    "people": [{"name": "Ann", "age": 30}],
    "unit": "c",
    "host": {"name": "Bo", "age": 4},
}


def _text(fmt: ToolCallFormat, name: str, arguments: dict[str, Any]) -> str:
    return render_calls(SYNTAXES[fmt][0], [CallText(name, arguments)])


def test_the_pydantic_tools_really_use_refs() -> None:
    assert "$defs" in MEETING.parameters and "$ref" in str(MEETING.parameters["properties"])
    assert "$ref" in str(FORECAST.parameters["properties"])


@pytest.mark.timeout(180)
@pytest.mark.parametrize("fmt", JSON_FAMILIES, ids=lambda f: f.value)
def test_a_pydantic_model_parameter_is_forced_in_every_json_family(
    model: llama_cpp.llama_model_p, fmt: ToolCallFormat
) -> None:
    grammar = call_grammar(fmt, [MEETING, FORECAST]).grammar
    text = _text(fmt, "Meeting", GOOD_MEETING)
    assert grammar_accepts(model, grammar, text)
    parser = new_parser(fmt)
    parser.feed(text)
    parser.finish()
    (parsed,) = parser.result().calls
    jsonschema.validate(parsed.arguments, MEETING.parameters)
    # What the referenced definitions forbid, the grammar forbids.
    no_age = {**GOOD_MEETING, "people": [{"name": "Ann"}]}
    bad_unit = {**GOOD_MEETING, "unit": "k"}
    for wrong in (no_age, bad_unit):
        assert not grammar_accepts(model, grammar, _text(fmt, "Meeting", wrong))
    # auto builds too (its lazy grammar holds the same rules).
    assert call_grammar(fmt, [MEETING], ToolChoice.AUTO).lazy


@pytest.mark.timeout(180)
@pytest.mark.parametrize("fmt", ALL_FAMILIES, ids=lambda f: f.value)
def test_an_enum_class_parameter_is_forced_in_every_family(
    model: llama_cpp.llama_model_p, fmt: ToolCallFormat
) -> None:
    grammar = call_grammar(fmt, [FORECAST], only="Forecast").grammar
    assert grammar_accepts(model, grammar, _text(fmt, "Forecast", {"city": "Oslo", "unit": "f"}))
    assert not grammar_accepts(
        model, grammar, _text(fmt, "Forecast", {"city": "Oslo", "unit": "k"})
    )


@pytest.mark.timeout(120)
def test_definitions_a_root_ref_and_escaped_names_resolve(model: llama_cpp.llama_model_p) -> None:
    """The draft-07 ``definitions``, a ref to the root itself (a tree) and a name that
    needs JSON-pointer escapes, and a definition named like a rule of the converter."""
    parameters: dict[str, Any] = {
        "type": "object",
        "definitions": {"a/b": {"type": "integer"}, "string": {"enum": ["x"]}},
        "properties": {
            "n": {"$ref": "#/definitions/a~1b"},
            "s": {"$ref": "#/definitions/string"},
            "child": {"$ref": "#"},
        },
        "required": ["n", "s"],
    }
    spec = ToolSpec("tree", parameters)
    grammar = call_grammar(F.HERMES, [spec]).grammar
    good = {"n": 1, "s": "x", "child": {"n": 2, "s": "x"}}
    assert grammar_accepts(model, grammar, _text(F.HERMES, "tree", good))
    jsonschema.validate(good, parameters)
    # "string" is the definition's enum, not any string.
    assert not grammar_accepts(model, grammar, _text(F.HERMES, "tree", {"n": 1, "s": "y"}))
    assert not grammar_accepts(model, grammar, _text(F.HERMES, "tree", {"n": "1", "s": "x"}))


def test_a_ref_that_points_at_nothing_is_a_sentence() -> None:
    spec = ToolSpec("lost", {"type": "object", "properties": {"p": {"$ref": "#/$defs/Nope"}}})
    with pytest.raises(ToolGrammarError) as caught:
        call_grammar(F.HERMES, [spec])
    message = str(caught.value)
    assert "'lost'" in message and "#/$defs/Nope" in message and message.endswith(".")
    assert "{" not in message  # no Python dict repr
    remote = {"type": "object", "properties": {"p": {"$ref": "https://example.com/s.json"}}}
    with pytest.raises(ToolGrammarError, match="not local"):
        call_grammar(F.HERMES, [ToolSpec("far", remote)])


def test_parameters_without_refs_are_used_as_given() -> None:
    parameters = {"type": "object", "properties": {"city": {"type": "string"}}}
    assert local_schema(parameters).parameters is parameters


def test_one_bad_tool_is_left_out_and_the_others_kept() -> None:
    """What the window and ``run --mcp`` offer of MCP servers' tools (usable_tools)."""
    from app.engine.tool_calls.usable import usable_tools

    good = openai.pydantic_function_tool(Meeting)
    no_grammar = {
        "type": "function",
        "function": {
            "name": "bad",
            "parameters": {
                "type": "object",
                "properties": {"p": {"type": "string", "pattern": "a{5000}"}},
            },
        },
    }
    malformed = {"type": "function", "function": {"name": "worse", "parameters": {"type": "array"}}}
    kept, warnings = usable_tools([good, no_grammar, malformed])
    assert kept == [good]
    assert [w.split(":")[0] for w in warnings] == [
        "The tool 'bad' is left out",
        "The tool 'worse' is left out",
    ]
    assert all(w.endswith(".") and "{'" not in w for w in warnings)


def test_refs_that_multiply_a_subtree_are_bounded() -> None:
    """Many spellings of one target share one definition (and a JSON Pointer index with a
    leading zero is no spelling at all); refs that still multiply the schema past the
    bound are a sentence, not seconds and hundreds of megabytes."""
    leaf = {"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(50)}}
    aliases = {f"a{i}": {"$ref": "#/$defs/L/0"} for i in range(200)}
    shared = local_schema({"type": "object", "properties": aliases, "$defs": {"L": [leaf]}})
    assert len(shared.definitions) == 1
    with pytest.raises(SchemaRefError, match="points at nothing"):
        local_schema(
            {
                "type": "object",
                "properties": {"a": {"$ref": "#/$defs/L/00"}},
                "$defs": {"L": [leaf]},
            }
        )
    # refs to every level of one deep tree: each target is a distinct node, and together
    # they copy ~22 * 300**2 / 2 parts
    tree: dict[str, Any] = {"type": "string"}
    for _ in range(300):
        props = {f"p{i}": {"type": "string"} for i in range(10)}
        tree = {"type": "object", "properties": {"n": tree, **props}}
    refs = {f"r{k}": {"$ref": "#/$defs/T" + "/properties/n" * k} for k in range(300)}
    with pytest.raises(SchemaRefError, match="too large"):
        local_schema({"type": "object", "properties": refs, "$defs": {"T": tree}})
