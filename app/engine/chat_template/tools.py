"""Tools and tool-call history as a template is given them, the way llama.cpp does it
(``common/chat.cpp`` and minja's capability probes and polyfills).

A template of a known family (:func:`~app.engine.tool_calls.detect_tool_format` names one)
renders the tools and past calls itself: it gets ``tools`` (OpenAI's function objects) and
assistant messages with ``tool_calls``. Templates disagree on two things, which a probe
finds out once per template (:func:`probe_tool_caps`):

* the call's ``arguments``: most read an object (``arguments|tojson``, ``arguments.items()``),
  some print the JSON text they are given;
* an assistant message with calls and no text: ``content`` None renders in most, others
  ``trim`` it and raise (llama.cpp's ``requires_non_null_content``): they get "".

A template that knows no tools (or only a syntax no parser reads) gets llama.cpp's generic
form instead: the tools described in the system message (:mod:`app.engine.tool_calls.generic`),
past calls written as the generic JSON the model is asked for, results as user messages
(minja's ``polyfill_tool_responses``). A family's template that shows past calls but does
not list the tools (DeepSeek R1's distills) gets the tools described the same way, with
its own call syntax as the example.

Rendering stays deterministic (the cache is reused by the prompt's prefix): the same
history and tools give the same text.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from app.engine.tool_calls.formats import SYNTAXES, ToolCallFormat, detect_tool_format
from app.engine.tool_calls.generic import generic_tools_prompt
from app.engine.tool_calls.render import CallText, render_calls
from app.engine.tool_calls.specs import ToolSpec

__all__ = ["ToolCaps", "adapt_tool_messages", "openai_tools", "probe_tool_caps"]

log = logging.getLogger(__name__)

_NEEDLE: Final = "needle-value-7f3a"
_RESULT: Final = "result-needle-9c1e"
_PROBE_TOOL: Final = ToolSpec(
    "probe_tool",
    {
        "type": "object",
        "properties": {"probe_arg": {"type": "string", "description": "An argument."}},
        "required": ["probe_arg"],
    },
    "A probe.",
)

RenderRaw = Callable[[list[dict[str, Any]], bool, dict[str, Any]], str]


@dataclass(frozen=True, slots=True)
class ToolCaps:
    """How a template takes tools (see the module docstring)."""

    lists_tools: bool  # it lists the tools itself (else: described in the system message)
    fmt: ToolCallFormat = ToolCallFormat.GENERIC  # how its model writes calls
    # It shows a past call (else: the call is written into the content, in its family's
    # syntax, so the model sees what it called and the cache keeps what it wrote).
    shows_calls: bool = True
    shows_calls_with_text: bool = True  # ... also when the message has text
    object_arguments: bool = True  # a call's arguments as an object (else: JSON text)
    null_content: bool = True  # a message with calls may have content None (else: "")


def openai_tools(tools: Sequence[ToolSpec]) -> list[dict[str, Any]]:
    """``tools`` as OpenAI's request lists them (what templates loop over)."""
    return [
        {
            "type": "function",
            "function": {
                "name": t.name,
                "description": t.description,
                "parameters": dict(t.parameters),
            },
        }
        for t in tools
    ]


def _probe_messages(arguments: Any, content: Any) -> list[dict[str, Any]]:
    call = {
        "id": "abcdefghi",
        "type": "function",
        "function": {"name": _PROBE_TOOL.name, "arguments": arguments},
    }
    return [
        {"role": "user", "content": "Call the probe."},
        {"role": "assistant", "content": content, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "abcdefghi", "name": _PROBE_TOOL.name, "content": _RESULT},
    ]


def _try(render: RenderRaw, messages: list[dict[str, Any]]) -> str | None:
    try:
        return render(messages, False, {"tools": openai_tools([_PROBE_TOOL])})
    except Exception as error:  # a template is foreign code: anything may come out
        log.debug("Tool probe refused: %s", error)
        return None


def _shows_arguments(text: str | None) -> bool:
    """The call's argument shows, and not as a Python dict's repr."""
    return text is not None and _NEEDLE in text and "{'probe_arg'" not in text


def probe_tool_caps(render: RenderRaw, source: str) -> ToolCaps:
    """What ``render`` (a template's raw render) does with tools and calls."""
    fmt = detect_tool_format(source)
    if fmt is ToolCallFormat.GENERIC:
        return ToolCaps(False, fmt, shows_calls=False, shows_calls_with_text=False)
    alone = [{"role": "user", "content": "Hello."}]
    shown = _try(render, alone)
    # (a family's template that does not list the tools: DeepSeek R1's distills)
    lists_tools = shown is not None and _PROBE_TOOL.name in shown
    as_object = {"probe_arg": _NEEDLE}
    as_text = json.dumps(as_object)
    with_object = _try(render, _probe_messages(as_object, ""))
    object_arguments = _shows_arguments(with_object) or not _shows_arguments(
        _try(render, _probe_messages(as_text, ""))
    )
    arguments = as_object if object_arguments else as_text
    with_none = _try(render, _probe_messages(arguments, None))
    null_content = with_none is not None and "None" not in with_none.replace(_NEEDLE, "")
    shows_calls = _NEEDLE in (_try(render, _probe_messages(arguments, "")) or "")
    with_text = _NEEDLE in (_try(render, _probe_messages(arguments, "Text.")) or "")
    return ToolCaps(lists_tools, fmt, shows_calls, with_text, object_arguments, null_content)


def _arguments(value: Any, as_object: bool) -> Any:
    if as_object:
        if isinstance(value, str):
            try:
                parsed = json.loads(value)
            except ValueError:
                return value  # not JSON: the model's own text, shown as it is
            return parsed
        return value
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _written_calls(fmt: ToolCallFormat, calls: Sequence[Mapping[str, Any]]) -> str:
    return render_calls(
        SYNTAXES[fmt][0],
        [
            CallText(str(c["function"]["name"]), _object_arguments(c), str(c.get("id") or ""))
            for c in calls
        ],
    )


def _native_message(message: Mapping[str, Any], caps: ToolCaps) -> dict[str, Any]:
    copy = dict(message)
    calls = copy.get("tool_calls")
    if not calls:
        copy.pop("tool_calls", None)
        return copy
    text = str(copy.get("content") or "")
    if not (caps.shows_calls_with_text if text else caps.shows_calls):
        del copy["tool_calls"]
        copy["content"] = text + _written_calls(caps.fmt, calls)
        return copy
    copy["tool_calls"] = [
        {
            **call,
            "function": {
                **call["function"],
                "arguments": _arguments(call["function"].get("arguments"), caps.object_arguments),
            },
        }
        for call in calls
    ]
    if not copy.get("content"):
        copy["content"] = None if caps.null_content else ""
    return copy


def _object_arguments(call: Mapping[str, Any]) -> Mapping[str, Any]:
    value = _arguments(call["function"].get("arguments"), True)
    return value if isinstance(value, Mapping) else {}


def _generic_message(message: Mapping[str, Any]) -> dict[str, Any]:
    role = message.get("role")
    calls = message.get("tool_calls")
    if role == "assistant" and calls:
        written = _written_calls(ToolCallFormat.GENERIC, calls)
        text = str(message.get("content") or "")
        copy = {k: v for k, v in message.items() if k != "tool_calls"}
        copy["content"] = f"{text}\n{written}" if text else written
        return copy
    if role == "tool":
        response = {"tool": message.get("name") or "", "content": message.get("content") or ""}
        return {
            "role": "user",
            "content": json.dumps({"tool_response": response}, ensure_ascii=False),
        }
    return dict(message)


def _named_results(messages: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The messages with each ``tool`` result that has no ``name`` given the name of the
    call its ``tool_call_id`` answers (standard clients send none; templates show it)."""
    names: dict[str, str] = {}
    out: list[Mapping[str, Any]] = []
    for message in messages:
        calls = message.get("tool_calls")
        if message.get("role") == "assistant" and isinstance(calls, list):
            for call in calls:
                function = call.get("function") if isinstance(call, Mapping) else None
                if isinstance(function, Mapping) and isinstance(call.get("id"), str):
                    names[call["id"]] = str(function.get("name") or "")
        if message.get("role") == "tool" and not message.get("name"):
            name = names.get(str(message.get("tool_call_id") or ""))
            if name:
                message = {**message, "name": name}
        out.append(message)
    return out


def adapt_tool_messages(
    messages: Sequence[Mapping[str, Any]], tools: Sequence[ToolSpec], caps: ToolCaps
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The messages (OpenAI's shape) and template variables for a render with ``tools``
    (none: only the history's calls are adapted)."""
    messages = _named_results(messages)
    if caps.lists_tools:
        extra: dict[str, Any] = {"tools": openai_tools(tools)} if tools else {}
        return [_native_message(m, caps) for m in messages], extra
    if caps.fmt is ToolCallFormat.GENERIC:
        adapted = [_generic_message(m) for m in messages]
    else:
        adapted = [_native_message(m, caps) for m in messages]
    if tools:
        prompt = generic_tools_prompt(tools, caps.fmt)
        if adapted and adapted[0].get("role") == "system":
            first = adapted[0]
            adapted[0] = {**first, "content": f"{first.get('content') or ''}\n\n{prompt}".lstrip()}
        else:
            adapted.insert(0, {"role": "system", "content": prompt})
    return adapted, {}
