"""A tool's parameters with their ``$ref`` s made to resolve wherever the call grammar puts
them (issue 27, item 7).

Pydantic models (the MCP SDK's tools, ``openai.pydantic_function_tool``) keep each nested
model under ``$defs`` and point at it with ``{"$ref": "#/$defs/Person"}``: a pointer from
the root of the parameters. The call grammar does not convert the parameters as a root: it
nests them in the call's object (``{"name": ..., "arguments": <parameters>}``), or converts
one parameter alone (the tag and Python-call syntaxes), and from there ``#/$defs/Person``
points at nothing; llama.cpp's converter then fails with "Error resolving ref".

So every local ref is resolved once, against the parameters' own root, and each target is
kept in one flat table under a name of its own; the refs are rewritten to
``#/$defs/<name>``, and the table goes at the root of whatever schema the grammar
converts (:func:`with_definitions`). A ref the parameters cannot resolve is a sentence.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

__all__ = ["LocalSchema", "SchemaRefError", "local_schema"]

_DEFS: Final = "$defs"
# A name that no rule of llama.cpp's converter has (its rule for a ref is named after the
# ref's last segment: a definition named "string" would otherwise reuse the string rule).
_PREFIX: Final = "ref-"
_NOT_NAME: Final = re.compile(r"[^A-Za-z0-9]+")
_MAX_REFS: Final = 1000
_MAX_NODES: Final = 200_000  # parts of the rewritten schema (a 200K-character schema has far fewer)
# Keywords whose value maps property names to schemas.
_NAME_MAPS: Final = frozenset({"properties", "patternProperties", "dependentSchemas"})


class SchemaRefError(ValueError):
    """A ``$ref`` of the parameters points at nothing (the message says which)."""


@dataclass(frozen=True, slots=True)
class LocalSchema:
    """The parameters with every local ref rewritten to ``#/$defs/<name>``, and the
    definitions those names stand for (empty when the parameters have no ref)."""

    parameters: Mapping[str, Any]
    definitions: Mapping[str, Any]

    def with_definitions(self, schema: Any) -> Any:
        """``schema`` (the parameters or a part of them) as a root the converter can
        resolve: the definitions at its root, or the schema itself when there are none."""
        if not self.definitions or not isinstance(schema, Mapping):
            return schema
        inner = {k: v for k, v in schema.items() if k not in (_DEFS, "definitions")}
        return {**inner, _DEFS: dict(self.definitions)}

    def deref(self, schema: Any) -> Any:
        """``schema`` with a ref at its top followed (a parameter whose type or enum the
        grammar reads lives behind one when it is a model or an enum class)."""
        for _ in range(_MAX_REFS):
            if not isinstance(schema, Mapping):
                return schema
            ref = schema.get("$ref")
            if not isinstance(ref, str) or not ref.startswith(f"#/{_DEFS}/"):
                return schema
            target = self.definitions.get(ref[len(f"#/{_DEFS}/") :])
            if target is None:
                return schema
            schema = target
        return schema


def _unescape(part: str) -> str:
    return part.replace("~1", "/").replace("~0", "~")


def _target(root: Any, ref: str) -> Any:
    node = root
    for raw in ref[2:].split("/") if ref != "#" else []:
        part = _unescape(raw)
        if isinstance(node, Mapping) and part in node:
            node = node[part]
        elif (
            isinstance(node, list)
            and part.isdigit()
            and str(int(part)) == part  # JSON Pointer: no leading zeros (one name each)
            and int(part) < len(node)
        ):
            node = node[int(part)]
        else:
            raise SchemaRefError(f"The schema's reference '{ref[:200]}' points at nothing.")
    return node


def local_schema(parameters: Mapping[str, Any]) -> LocalSchema:
    """The parameters with their local refs resolved into one table (see the module's
    docstring); :class:`SchemaRefError` for a ref that resolves to nothing or is not local
    (the grammar fetches nothing)."""
    names: dict[str, str] = {}  # ref -> name in the table
    by_target: dict[int, str] = {}  # id of the referenced node -> its name (aliases share it)
    definitions: dict[str, Any] = {}
    todo: list[str] = []
    nodes = 0  # what the rewrite has produced: bounded, whatever the refs multiply

    def name_of(ref: str) -> str:
        if ref in names:
            return names[ref]
        if ref != "#" and not ref.startswith("#/"):
            raise SchemaRefError(
                f"The schema's reference '{ref[:200]}' is not local to it; only '#/...' "
                "references can be turned into a grammar."
            )
        if len(names) >= _MAX_REFS:
            raise SchemaRefError(f"The schema has more than {_MAX_REFS:,} references.")
        target = _target(parameters, ref)
        if id(target) in by_target:  # another spelling of a ref already named
            names[ref] = by_target[id(target)]
            return names[ref]
        base = _PREFIX + (_NOT_NAME.sub("-", ref.rsplit("/", 1)[-1]).strip("-") or "root")
        name, n = base, 1
        while name in definitions or name in names.values():
            n += 1
            name = f"{base}-{n}"
        names[ref] = by_target[id(target)] = name
        definitions[name] = None  # filled below
        todo.append(ref)
        return name

    def rewrite(node: Any, names_map: bool = False) -> Any:
        # ``names_map``: the keys are property names, not keywords (a property may be
        # called "$ref" or "definitions"). The parameters were checked by jsonschema,
        # which recurses too, so their depth is bounded before they get here.
        nonlocal nodes
        nodes += 1
        if nodes > _MAX_NODES:
            raise SchemaRefError(
                f"The schema's references expand to more than {_MAX_NODES:,} parts; "
                "a grammar for it would be too large."
            )
        if isinstance(node, list):
            return [rewrite(item) for item in node]
        if not isinstance(node, Mapping):
            return node
        out: dict[str, Any] = {}
        for key, value in node.items():
            if names_map:
                out[key] = rewrite(value)
            elif key == "$ref" and isinstance(value, str):
                out[key] = f"#/{_DEFS}/{name_of(value)}"
            elif key in (_DEFS, "definitions"):
                continue  # a table: its entries are reached through the refs
            else:
                out[key] = rewrite(value, key in _NAME_MAPS)
        return out

    top = rewrite(parameters)
    while todo:
        ref = todo.pop()
        definitions[names[ref]] = rewrite(_target(parameters, ref))
    if not definitions:
        return LocalSchema(parameters, {})
    return LocalSchema(top, definitions)
