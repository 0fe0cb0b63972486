"""Grammars that make the model write a call: ``tool_choice`` ``required`` or a named
function (the whole reply is calls), and ``auto`` (a lazy grammar that starts at the
family's trigger, as llama.cpp does with ``llama_sampler_init_grammar_lazy_patterns``).

Each call is written in the family's canonical syntax (:mod:`app.engine.tool_calls.render`
writes the same text), its arguments constrained by the tool's JSON schema through the
app's converter (:mod:`app.engine.json_grammar`), whose rules are renamed per tool so that
several tools share one grammar. The whole grammar is checked by
:mod:`app.engine.grammar_bounds` before llama.cpp sees it.
"""

from __future__ import annotations

import enum
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from app.engine.errors import ContextError
from app.engine.grammar_bounds import GrammarBoundsError, GrammarSyntaxError, check_grammar
from app.engine.json_grammar import SchemaGrammarError, schema_grammar
from app.engine.reasoning import ReasoningFormat, format_markers
from app.engine.tool_calls.formats import SYNTAXES, ToolCallFormat
from app.engine.tool_calls.schema_refs import LocalSchema, SchemaRefError, local_schema
from app.engine.tool_calls.specs import ToolSpec
from app.engine.tool_calls.syntax import (
    CallId,
    CallSyntax,
    JsonArgs,
    JsonCall,
    Lit,
    Name,
    PyCall,
    TagParams,
)

__all__ = ["CallGrammar", "ToolChoice", "ToolGrammarError", "ToolSpec", "call_grammar"]

_TOKEN: Final = re.compile(
    r'"(?:\\.|[^"\\])*"|\[(?:\\.|[^\]\\])*\]|\{[^}]*\}|#[^\n]*|[A-Za-z0-9-]+|.', re.S
)
_RULE_NAME: Final = re.compile(r"[A-Za-z][A-Za-z0-9-]*")
_ID_LENGTH_ANY: Final = 24
_ECMA_SPECIAL: Final = re.compile(r"[\\^$.|?*+()\[\]{}/]")


class ToolGrammarError(ContextError):
    """The tools cannot be forced in this family (the message says why)."""


class ToolChoice(enum.Enum):
    AUTO = "auto"  # the model may call: a lazy grammar from the trigger on
    REQUIRED = "required"  # the reply is one call (or several, when parallel) to any tool


@dataclass(frozen=True, slots=True)
class CallGrammar:
    """A GBNF grammar rooted at ``root``; when ``lazy``, it starts where one of
    ``trigger_patterns`` (ECMAScript regular expressions, searched in the reply; the
    grammar takes over at the first capturing group) matches."""

    grammar: str
    lazy: bool
    trigger_patterns: tuple[str, ...] = ()
    root: str = "root"


def _literal(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def _rename(grammar: str, prefix: str) -> str:
    """The grammar with every rule name prefixed (literals, classes and counts kept)."""
    out = []
    for token in _TOKEN.findall(grammar):
        out.append(prefix + token if _RULE_NAME.fullmatch(token) else token)
    return "".join(out)


def _schema_rule(schema: Any, prefix: str, rules: list[str], tool: str) -> str:
    """Add the rules of ``schema`` under ``prefix``; the name of its root rule."""
    try:
        grammar = schema_grammar(schema)
    except SchemaGrammarError as exc:
        raise ToolGrammarError(
            f"The parameters of the tool '{tool}' cannot be enforced: {exc}"
        ) from None
    rules.append(_canonical_spacing(_rename(grammar, prefix), prefix))
    return prefix + "root"


def _canonical_spacing(grammar: str, prefix: str) -> str:
    """The JSON of a call spaced as the templates write it back (``tojson``, Python's
    ``json.dumps``: ``", "`` and ``": "``, no other space): the re-sent history then
    renders to the text the model wrote, and the cache holds it (issue 23, item 2)."""
    space = re.escape(prefix + "space")
    grammar = re.sub(rf'"([,:])" +{space}\b', r'"\1 "', grammar)
    return re.sub(rf"^{space} ::= .*$", f'{prefix}space ::= ""', grammar, flags=re.M)


def _until(literal: str, name: str, rules: list[str]) -> str:
    """A rule for any text that does not contain ``literal``."""
    alts = []
    for n in range(len(literal)):
        head = _literal(literal[:n]) + " " if n else ""
        alts.append(f"{head}[^{_class_char(literal[n])}]")
    rules.append(f"{name} ::= ({' | '.join(alts)})*")
    return name


def _class_char(c: str) -> str:
    return "\\" + c if c in "]^\\-[" else ("\\n" if c == "\n" else c)


def _params(schema: Mapping[str, Any]) -> tuple[list[tuple[str, Any]], set[str]]:
    props = schema.get("properties")
    required = schema.get("required")
    items = list(props.items()) if isinstance(props, Mapping) else []
    return items, set(required) if isinstance(required, list) else set()


def _tag_params(
    piece: TagParams, tool: ToolSpec, local: LocalSchema, prefix: str, rules: list[str]
) -> str:
    items, required = _params(local.deref(local.parameters))
    parts = []
    for k, (key, given) in enumerate(items):
        prop = local.deref(given)
        enum = prop.get("enum") if isinstance(prop, Mapping) else None
        words = (
            enum
            if isinstance(enum, list) and enum and all(isinstance(w, str) for w in enum)
            else None
        )
        string = words is not None or (isinstance(prop, Mapping) and prop.get("type") == "string")
        if words is not None:  # a string value is written bare in tags
            value = "(" + " | ".join(_literal(w) for w in words) + ")"
        elif string:
            value = _until(piece.value_end.strip(), f"{prefix}p{k}-text", rules)
        else:
            value = _schema_rule(local.with_definitions(prop), f"{prefix}p{k}-", rules, tool.name)
        attrs = (
            (piece.string_attrs if string else piece.other_attrs) + piece.attrs_end
            if piece.attrs_end
            else ""
        )
        head = piece.open + key + piece.key_end + attrs + piece.value_open
        part = f"{_literal(head)} {value} {_literal(piece.value_end)}"
        parts.append(part if key in required else f"({part})?")
    return " ".join(parts) if parts else '""'


@dataclass(frozen=True, slots=True)
class _FlatStyle:
    """How a family without JSON arguments writes a parameter (LFM2, Gemma 4)."""

    family: str
    assign: str
    quote: str  # around a string
    true: str
    false: str


_PY: Final = _FlatStyle("LFM2", "=", '"', "True", "False")
_GEMMA: Final = _FlatStyle("Gemma 4", ":", '<|"|>', "true", "false")
_SCALARS: Final = frozenset({"string", "integer", "number", "boolean"})


def _flat_value(
    prop: Any, local: LocalSchema, style: _FlatStyle, name: str, rules: list[str], tool: str
) -> str:
    kind = prop.get("type") if isinstance(prop, Mapping) else None
    enum = prop.get("enum") if isinstance(prop, Mapping) else None
    quote = _literal(style.quote)
    if isinstance(enum, list) and enum and all(isinstance(w, str) for w in enum):
        return f"{quote} (" + " | ".join(_literal(w) for w in enum) + f") {quote}"
    if kind not in _SCALARS:
        raise ToolGrammarError(
            f"Forced calls in {style.family}'s syntax take strings, numbers and booleans; a parameter of the "
            f"tool '{tool}' is not one of them."
        )
    if kind == "string" and style.quote == '"':  # a JSON-escaped string is a Python literal
        rules.append(name + r' ::= ([^"\\\x00-\x1F] | "\\" ["\\/bfnrt])*')
        return f"{quote} {name} {quote}"
    if kind == "string":
        return f"{quote} {_until(style.quote, name, rules)} {quote}"
    if kind == "boolean":
        return f"({_literal(style.true)} | {_literal(style.false)})"
    return _schema_rule(local.with_definitions(prop), name + "-", rules, tool)


def _flat_params(
    tool: ToolSpec, local: LocalSchema, prefix: str, rules: list[str], style: _FlatStyle
) -> str:
    """The parameters, in the schema's order, each optional one optional, separated by a
    comma (LFM2's reader does not split ``city="Rome" days=9`` into two parameters)."""
    items, required = _params(local.deref(local.parameters))
    sep = '"," " "?'
    parts = []
    for k, (key, prop) in enumerate(items):
        value = _flat_value(local.deref(prop), local, style, f"{prefix}p{k}", rules, tool.name)
        part = f"{sep if k else ''} {_literal(key + style.assign)} {value}"
        parts.append(part if key in required else f"({part})?")
    return " ".join(parts) if parts else '""'


def _call_rule(syntax: CallSyntax, tool: ToolSpec, k: int, rules: list[str]) -> str:
    prefix = f"t{k}-"
    try:
        local = local_schema(tool.parameters)
    except SchemaRefError as exc:
        raise ToolGrammarError(
            f"The parameters of the tool '{tool.name}' cannot be enforced: {exc}"
        ) from None
    out = []
    for at, piece in enumerate(syntax.call):
        if isinstance(piece, Lit):
            # A lazy grammar starts at the trigger, after the whitespace that may precede it.
            first = at == 0 and not syntax.section_open
            out.append(_literal(piece.text.lstrip() if first else piece.text))
        elif isinstance(piece, Name):
            out.append(_literal(tool.name))
        elif isinstance(piece, CallId):
            n = piece.length
            out.append(f"[A-Za-z0-9]{{{n}}}" if n else f"[A-Za-z0-9_-]{{1,{_ID_LENGTH_ANY}}}")
        elif isinstance(piece, JsonArgs):
            out.append(
                _schema_rule(local.with_definitions(local.parameters), prefix, rules, tool.name)
            )
        elif isinstance(piece, JsonCall):
            if piece.name_is_key:
                props: dict[str, Any] = {tool.name: local.parameters}
                req = [tool.name]
            else:
                props = {
                    piece.name_keys[0]: {"const": tool.name},
                    piece.args_keys[0]: local.parameters,
                }
                req = [piece.name_keys[0], piece.args_keys[0]]
            whole = {
                "type": "object",
                "properties": props,
                "required": req,
                "additionalProperties": False,
            }
            out.append(_schema_rule(local.with_definitions(whole), prefix, rules, tool.name))
        elif isinstance(piece, TagParams):
            out.append(_tag_params(piece, tool, local, prefix, rules))
        elif isinstance(piece, PyCall):
            out.append(
                f'{_literal(tool.name)} "(" {_flat_params(tool, local, prefix, rules, _PY)} ")"'
            )
        else:
            out.append(f'"{{" {_flat_params(tool, local, prefix, rules, _GEMMA)} "}}"')
    rules.append(f"call-{k} ::= {' '.join(out)}")
    return f"call-{k}"


def _regex_escape(text: str) -> str:
    """``text`` as an ECMAScript pattern (llama.cpp's std::regex refuses some of the
    identity escapes Python's re.escape writes, such as an escaped space)."""
    return _ECMA_SPECIAL.sub(lambda m: "\\" + m.group(), text)


def _trigger_pattern(syntax: CallSyntax, reasoning: ReasoningFormat, opened: bool) -> str:
    """Where a lazy grammar starts: at the trigger, and not inside the reasoning (a model
    thinking about a call is not calling)."""
    trigger = _regex_escape(syntax.trigger)
    if syntax.start_only:
        return rf"^\s*({trigger})"
    opens, closes = format_markers(reasoning)
    if not opens or reasoning in (ReasoningFormat.HARMONY, ReasoningFormat.GLIMMER):
        return f"({trigger})"
    start, end = _regex_escape(opens[0].strip()), _regex_escape(closes[0].strip())
    after = rf"^[\s\S]*?{end}[\s\S]*?({trigger})"
    if opened:
        return after
    return rf"^(?!\s*{start})[\s\S]*?({trigger})|^\s*{start}[\s\S]*?{end}[\s\S]*?({trigger})"


def _reasoning_prefix(reasoning: ReasoningFormat, opened: bool, rules: list[str]) -> str:
    """The optional reasoning before forced calls (the whole reasoning when the prompt
    opened it): the model still thinks first, as llama.cpp lets it."""
    opens, closes = format_markers(reasoning)
    if not opens or reasoning is ReasoningFormat.GLIMMER:
        return ""
    thought = f"{_until(closes[0], 'thought-text', rules)} {_literal(closes[0])}"
    after = '"<|start|>assistant"' if reasoning is ReasoningFormat.HARMONY else "[ \t\n]*"
    rules.append(f"thought ::= {thought} {after}")
    return "thought " if opened else f"({_literal(opens[0])} thought)? "


def call_grammar(
    fmt: ToolCallFormat,
    tools: Sequence[ToolSpec],
    choice: ToolChoice = ToolChoice.REQUIRED,
    *,
    only: str | None = None,
    parallel: bool = False,
    reasoning: ReasoningFormat = ReasoningFormat.NONE,
    starts_in_reasoning: bool = False,
) -> CallGrammar:
    """The grammar of calls to ``tools`` (to the one named ``only``, for a named choice).

    ``reasoning`` (and ``starts_in_reasoning``: the prompt opened it) let a forced reply
    reason first; a lazy grammar starts at the call, after any reasoning, and ignores them.
    """
    if only is not None:
        tools = [t for t in tools if t.name == only]
        if not tools:
            raise ToolGrammarError(
                f"The tool_choice names the function '{only}', which is not among the tools."
            )
    if not tools:
        raise ToolGrammarError("A tool call cannot be required without tools.")
    syntax = SYNTAXES[fmt][0]
    rules: list[str] = []
    names = [_call_rule(syntax, tool, k, rules) for k, tool in enumerate(tools)]
    rules.append(f"call ::= {' | '.join(names)}")
    more = f"({_literal(syntax.separator)} call)*" if parallel else ""
    if syntax.section_open:
        body = (
            f"{_literal(syntax.section_open.lstrip())} call {more} {_literal(syntax.section_close)}"
        )
    else:
        body = f"call ({_literal(syntax.separator or chr(10))} call)*" if parallel else "call"
    lead = (
        ""
        if choice is ToolChoice.AUTO
        else _reasoning_prefix(reasoning, starts_in_reasoning, rules)
    )
    grammar = f"root ::= {lead}{body}\n" + "\n".join(rules) + "\n"
    try:
        check_grammar(grammar)
    except (GrammarBoundsError, GrammarSyntaxError) as exc:
        raise ToolGrammarError(f"The tools' grammar cannot be used: {exc}") from None
    if choice is ToolChoice.AUTO:
        pattern = _trigger_pattern(syntax, reasoning, starts_in_reasoning)
        return CallGrammar(grammar, lazy=True, trigger_patterns=(pattern,))
    return CallGrammar(grammar, lazy=False)
