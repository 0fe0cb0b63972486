"""The written shape of a tool call, as data: one description serves the parser, the
renderer and the grammar of forced calls, so the three cannot disagree.

A call is a sequence of :data:`Piece` s. Literals are written in their canonical form (the
whitespace the chat template renders); the parser lets any run of whitespace in a literal
match any run (including none) and skips whitespace before a literal, as llama.cpp's
parsers do. Calls may sit inside a *section* (``[TOOL_CALLS][ ... ]``,
``<|tool_calls_section_begin|> ... <|tool_calls_section_end|>``) and be separated by a
separator (``,`` in JSON arrays).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "CallId",
    "CallSyntax",
    "GemmaArgs",
    "JsonArgs",
    "JsonCall",
    "Lit",
    "Name",
    "Piece",
    "PyCall",
    "TagParams",
]


@dataclass(frozen=True, slots=True)
class Lit:
    """Fixed text."""

    text: str


@dataclass(frozen=True, slots=True)
class Name:
    """The function name: a run of letters, digits, ``_``, ``-`` and ``.``."""


@dataclass(frozen=True, slots=True)
class CallId:
    """An id the model writes for its call (letters, digits, ``_``, ``-``)."""

    length: int = 0  # the grammar's fixed length (Mistral: 9); 0: any length from 1
    shape: str = "{id}"  # the call's id from the written one and the name (Kimi)


@dataclass(frozen=True, slots=True)
class JsonArgs:
    """The arguments as one JSON object, streamed as written."""


@dataclass(frozen=True, slots=True)
class JsonCall:
    """The whole call as one JSON object: the name under one of ``name_keys`` and the
    arguments under one of ``args_keys`` (other keys, such as an id, are read past);
    ``name_is_key``: the object is ``{"name": {arguments}}`` (Apertus)."""

    name_keys: tuple[str, ...] = ("name",)
    args_keys: tuple[str, ...] = ("arguments", "parameters")
    name_is_key: bool = False


@dataclass(frozen=True, slots=True)
class TagParams:
    """Arguments as tagged parameters, repeated:
    ``open KEY key_end [ATTRS attrs_end] value_open VALUE value_end`` (Qwen3-Coder
    ``<parameter=KEY>VALUE</parameter>``, GLM ``<arg_key>KEY</arg_key><arg_value>VALUE
    </arg_value>``). With ``attrs_end``, attributes follow the key up to it; the renderer
    writes ``string_attrs`` for a string value and ``other_attrs`` for any other. A value is
    a string when the tool's schema says so or ``string_attrs`` appear in its attributes;
    otherwise JSON when it parses as JSON, else a string."""

    open: str
    key_end: str
    value_open: str
    value_end: str
    attrs_end: str = ""
    string_attrs: str = ""
    other_attrs: str = ""


@dataclass(frozen=True, slots=True)
class PyCall:
    """``name(key=value, ...)`` with Python (or JSON) literal values (LFM2)."""


@dataclass(frozen=True, slots=True)
class GemmaArgs:
    """Gemma 4's ``{key:value,...}``: bare keys, strings quoted with ``<|"|>``."""


Piece = Lit | Name | CallId | JsonArgs | JsonCall | TagParams | PyCall | GemmaArgs


@dataclass(frozen=True, slots=True)
class CallSyntax:
    """How one family writes its calls.

    ``start_only``: calls count only at the start of the answer (Llama 3's bare JSON).
    """

    call: tuple[Piece, ...]
    section_open: str = ""
    section_close: str = ""
    separator: str = ""
    start_only: bool = False

    @property
    def trigger(self) -> str:
        """The text that opens a call (or a section of calls), whitespace trimmed."""
        if self.section_open:
            return self.section_open.strip()
        first = self.call[0]
        if isinstance(first, Lit):
            return first.text.strip()
        if isinstance(first, JsonCall):
            return "{"
        raise ValueError("a call syntax must open with a literal or a JSON object")
