"""The tools of a request, checked: OpenAI's ``tools`` list into :class:`ToolSpec` s, with
a sentence for each way it can be malformed (the server answers it with a 400), and a
call's arguments checked against its tool's schema (the model is told what is wrong)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from app.engine.errors import ContextError

__all__ = ["ToolSpec", "ToolSpecError", "check_arguments", "tool_specs"]

# OpenAI's rule for function names, and the names the call parsers read.
_NAME: Final = re.compile(r"[A-Za-z0-9_.\-]{1,64}")
_NO_PARAMETERS: Final = {"type": "object", "properties": {}}


class ToolSpecError(ContextError):
    """The request's tools are malformed (the message says which and how)."""


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """A function the model may call: its name, description and parameters' JSON schema."""

    name: str
    parameters: Mapping[str, Any]
    description: str = ""


def _spec(index: int, tool: Any) -> ToolSpec:
    where = f"tools[{index}]"
    if not isinstance(tool, Mapping) or tool.get("type", "function") != "function":
        raise ToolSpecError(f"{where} must be an object of type 'function'.")
    function = tool.get("function")
    if not isinstance(function, Mapping):
        raise ToolSpecError(f"{where} has no 'function' object.")
    name = function.get("name")
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ToolSpecError(
            f"{where}.function.name must be 1 to 64 letters, digits, '_', '-' or '.' (got {name!r})."
        )
    description = function.get("description", "")
    if not isinstance(description, str):
        raise ToolSpecError(f"{where}.function.description must be a string.")
    parameters = function.get("parameters", _NO_PARAMETERS)
    if not isinstance(parameters, Mapping) or parameters.get("type", "object") != "object":
        raise ToolSpecError(f"{where}.function.parameters must be a JSON schema of type 'object'.")
    # imported where tools are given: jsonschema and its schema registry would otherwise
    # slow the start of every process that only chats (``run --resume-session``, a window)
    import jsonschema  # type: ignore[import-untyped]

    try:
        jsonschema.validators.validator_for(parameters).check_schema(parameters)
    except jsonschema.SchemaError as exc:
        raise ToolSpecError(
            f"{where}.function.parameters is not a valid JSON schema: {exc.message}."
        ) from None
    except RecursionError:  # the checker recurses per level: a request's nesting is bounded
        raise ToolSpecError(f"{where}.function.parameters is nested too deeply.") from None
    return ToolSpec(name, parameters, description)


def tool_specs(tools: Any) -> tuple[ToolSpec, ...]:
    """The tools of a chat request (its ``tools`` value), or :class:`ToolSpecError`."""
    if not isinstance(tools, list):
        raise ToolSpecError("tools must be a list of function tools.")
    specs = tuple(_spec(i, tool) for i, tool in enumerate(tools))
    seen: set[str] = set()
    for spec in specs:
        if spec.name in seen:
            raise ToolSpecError(f"Two tools are named '{spec.name}'; each needs its own name.")
        seen.add(spec.name)
    return specs


def check_arguments(spec: ToolSpec, arguments: Mapping[str, Any]) -> str | None:
    """None when ``arguments`` fit the tool's schema, else a sentence (for the model and
    the user) naming the first thing wrong."""
    import jsonschema

    validator = jsonschema.validators.validator_for(spec.parameters)(spec.parameters)
    try:
        error = jsonschema.exceptions.best_match(validator.iter_errors(dict(arguments)))
    except RecursionError:
        return f"The arguments of the call to '{spec.name}' are nested too deeply to check."
    if error is None:
        return None
    where = "".join(f"[{p!r}]" for p in error.absolute_path)
    return f"The arguments of the call to '{spec.name}' do not fit its schema{(' at ' + where) if where else ''}: {error.message}."
