"""JSON grammars: llama.cpp's JSON-schema-to-GBNF converter, as llama-cpp-python ships it.

The API server turns ``response_format`` into a GBNF grammar here, so that nothing outside
``app/engine`` imports ``llama_cpp``. The converter is pure Python (a port of llama.cpp's
``examples/json_schema_to_grammar.py``); the grammar is parsed by llama.cpp when a sampler
is built from it.
"""

from __future__ import annotations

import json
from typing import Any

from llama_cpp.llama_grammar import JSON_GBNF, json_schema_to_gbnf

from app.engine.errors import ContextError

__all__ = ["JSON_OBJECT_GBNF", "SchemaGrammarError", "json_object_grammar", "schema_grammar"]

# Any JSON object (OpenAI's ``json_object`` mode): llama.cpp's json.gbnf, rooted at an object.
JSON_OBJECT_GBNF: str = JSON_GBNF

MAX_SCHEMA_CHARS = 200_000


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
    text = json.dumps(schema)
    if len(text) > MAX_SCHEMA_CHARS:
        raise SchemaGrammarError(
            f"The JSON schema is too large ({len(text):,} characters; at most {MAX_SCHEMA_CHARS:,})."
        )
    try:
        grammar = json_schema_to_gbnf(text)
    except RecursionError:
        raise SchemaGrammarError("The JSON schema is nested too deeply.") from None
    except Exception as exc:  # the converter raises bare exceptions of several kinds
        raise SchemaGrammarError(
            f"The JSON schema cannot be turned into a grammar ({exc})."
        ) from None
    if not isinstance(grammar, str) or "root" not in grammar:
        raise SchemaGrammarError("The JSON schema gave no grammar.")
    return grammar
