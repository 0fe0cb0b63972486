"""JSON grammars: llama.cpp's JSON-schema-to-GBNF converter, as llama-cpp-python ships it.

The API server turns ``response_format`` into a GBNF grammar here, so that nothing outside
``app/engine`` imports ``llama_cpp``. The converter is pure Python (a port of llama.cpp's
``examples/json_schema_to_grammar.py``); the grammar is parsed by llama.cpp when a sampler
is built from it.

A schema is small but its grammar need not be: the converter writes ``maxLength: n`` (and
``maxItems``, and ``{m,n}`` in a ``pattern``) as ``n`` groups nested in each other, so 40
bytes of schema become 800 KB of GBNF that crashes llama.cpp's recursive parser. So every
repetition count in the schema is bounded before the converter runs (it would otherwise
build the text whatever its size), and the grammar it gives is checked by
:mod:`app.engine.grammar_bounds` like any other. Beyond a bound the schema is refused, not
clamped: a shorter ``maxLength`` would quietly cut replies the client allowed.
"""

from __future__ import annotations

import json
import re
from typing import Any

from llama_cpp.llama_grammar import JSON_GBNF, json_schema_to_gbnf

from app.engine.errors import ContextError
from app.engine.grammar_bounds import LIMITS, GrammarBoundsError, GrammarSyntaxError, check_grammar
from app.engine.tool_calls.schema_refs import SchemaRefError, local_schema

__all__ = ["JSON_OBJECT_GBNF", "SchemaGrammarError", "json_object_grammar", "schema_grammar"]

# Any JSON object (OpenAI's ``json_object`` mode): llama.cpp's json.gbnf, rooted at an object.
JSON_OBJECT_GBNF: str = JSON_GBNF

MAX_SCHEMA_CHARS = 200_000
# The converter nests one group per optional repetition, so a count is a nesting depth.
MAX_SCHEMA_REPETITION = LIMITS.max_depth
# Schema keywords the converter expands into that many copies or nested groups.
_COUNTS = ("minLength", "maxLength", "minItems", "maxItems")
# The converter's character of a JSON string admits control characters, which JSON does not
# (strict parsers refuse the reply); llama.cpp's own converter excludes them, as this does.
_STRING_CHAR = re.compile(r'^char ::= \[\^"\\\\\] ', re.MULTILINE)  # char ::= [^"\\] ...
_JSON_STRING_CHAR = r'char ::= [^"\\\x7F\x00-\x1F] '
# A quantifier of a regular expression (what the converter reads in ``pattern``).
_QUANTIFIER = re.compile(r"\{\s*(\d*)\s*(?:,\s*(\d*)\s*)?\}")


class SchemaGrammarError(ContextError):
    """A JSON schema the converter cannot turn into a grammar (the message says why)."""


def json_object_grammar() -> str:
    return JSON_OBJECT_GBNF


def schema_grammar(schema: Any) -> str:
    """The GBNF grammar of the JSON schema ``schema`` (a dict), or :class:`SchemaGrammarError`."""
    if isinstance(schema, bool):
        if not schema:
            raise SchemaGrammarError("The JSON schema `false` matches nothing.")
        return JSON_GBNF
    if not isinstance(schema, dict):
        raise SchemaGrammarError(f"A JSON schema must be an object, not {type(schema).__name__}.")
    try:
        text = json.dumps(schema)
    except RecursionError:
        raise SchemaGrammarError("The JSON schema is nested too deeply.") from None
    if len(text) > MAX_SCHEMA_CHARS:
        raise SchemaGrammarError(
            f"The JSON schema is too large ({len(text):,} characters; at most {MAX_SCHEMA_CHARS:,})."
        )
    _check_counts(schema)
    try:
        # Every ref resolved here, with a sentence for one that points at nothing (the
        # converter's own message quotes the whole schema as a Python dict), and each
        # definition named apart from the converter's own rules.
        local = local_schema(schema)
        text = json.dumps(local.with_definitions(local.parameters))
    except SchemaRefError as exc:
        raise SchemaGrammarError(str(exc)) from None
    except RecursionError:
        raise SchemaGrammarError("The JSON schema is nested too deeply.") from None
    try:
        grammar = json_schema_to_gbnf(text)
    except RecursionError:
        raise SchemaGrammarError("The JSON schema is nested too deeply.") from None
    except Exception as exc:  # the converter raises bare exceptions of several kinds
        raise SchemaGrammarError(
            f"The JSON schema cannot be turned into a grammar ({_said(exc)})."
        ) from None
    if not isinstance(grammar, str) or "root" not in grammar:
        raise SchemaGrammarError("The JSON schema gave no grammar.")
    grammar = _STRING_CHAR.sub(lambda _: _JSON_STRING_CHAR, grammar)
    try:
        check_grammar(grammar)
    except GrammarBoundsError as exc:
        raise SchemaGrammarError(f"The JSON schema's grammar is too large: {exc}") from None
    except GrammarSyntaxError as exc:
        raise SchemaGrammarError(
            f"The JSON schema gave a grammar llama.cpp refuses: {exc}"
        ) from None
    return grammar


def _said(exc: Exception) -> str:
    """What the converter said, without the schema it quotes as a Python dict."""
    text = str(exc).split("{", 1)[0].split("[", 1)[0].rstrip(" :,") or type(exc).__name__
    return text[:200]


def _check_counts(schema: dict[str, Any]) -> None:
    """Refuse a repetition count above :data:`MAX_SCHEMA_REPETITION` anywhere in the schema
    (walked without recursion: a schema may nest deeply)."""
    todo: list[Any] = [schema]
    while todo:
        node = todo.pop()
        if isinstance(node, list):
            todo.extend(node)
            continue
        if not isinstance(node, dict):
            continue
        for key, value in node.items():
            if key in _COUNTS and isinstance(value, int) and not isinstance(value, bool):
                _check_count(f"'{key}' of {value:,}" if value < 10**20 else f"'{key}'", value)
            elif key == "pattern" and isinstance(value, str):
                for match in _QUANTIFIER.finditer(value):
                    for digits in match.groups():
                        if digits:
                            # int() refuses over 4,300 digits; the length says enough
                            count = int(digits) if len(digits) < 20 else 10**20
                            quantifier = match.group(0)[:40]
                            _check_count(f"'pattern' quantifier {quantifier}", count)
            elif isinstance(value, dict | list):
                todo.append(value)


def _check_count(what: str, count: int) -> None:
    if count > MAX_SCHEMA_REPETITION:
        raise SchemaGrammarError(
            f"The JSON schema's {what} repeats more than a grammar may (the grammar nests "
            f"one group per repetition); at most {MAX_SCHEMA_REPETITION:,}."
        )
