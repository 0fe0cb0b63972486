"""Bounds on a GBNF grammar, checked in Python before llama.cpp sees it.

llama.cpp's grammar code trusts its input. Its parser recurses once per nested group
(``( ... )``), its left-recursion check recurses once per rule reference at the start of a
rule (or after rules that may be empty), and repetitions are expanded into rules when the
grammar is parsed (``x{0,n}`` becomes ``n`` rules, ``x{m}`` copies ``x`` ``m`` times). A
grammar of 20,000 nested groups overflows the C stack (SIGSEGV: no reply, no log, the whole
process gone), and a few hundred bytes of repetitions allocate gigabytes. Building a
sampler also expands the start rule into every way it can begin (its "stacks"), which a
grammar of 30 lines can make 2**30.

So this module reads the grammar the way ``llama_grammar_parser`` does (a faithful port of
``src/llama-grammar.cpp``'s parse, repetition rewrite and left-recursion check, of llama.cpp
as llama-cpp-python 0.3.36 vendors it), counts what llama.cpp would build, and refuses a
grammar beyond :data:`LIMITS` with a sentence that names the limit. Nothing here recurses,
and nothing is built beyond a limit before the limit is checked.

A grammar llama.cpp would refuse gracefully (a syntax error, an undefined rule) is refused
here too, with the line and column, since this reading has to find where it stops anyway.
Whether a ``<token>`` names one token of the model's vocabulary is left to llama.cpp.

Rooms: :mod:`.limits` (the limits and errors), :mod:`.parser` (the parse and the repetition
rewrite), :mod:`.analysis` (the left-recursion check and the ways to begin).
"""

from __future__ import annotations

import functools

from app.engine.errors import ContextError
from app.engine.grammar_bounds.analysis import _left_recursion_check, _max_ways
from app.engine.grammar_bounds.limits import (
    LIMITS,
    GrammarBoundsError,
    GrammarLimits,
    GrammarShape,
    GrammarSyntaxError,
)
from app.engine.grammar_bounds.parser import _Parser

__all__ = [
    "LIMITS",
    "GrammarBoundsError",
    "GrammarLimits",
    "GrammarShape",
    "GrammarSyntaxError",
    "check_grammar",
    "measure_grammar",
]


def check_grammar(text: str, limits: GrammarLimits = LIMITS) -> None:
    """Raise :class:`GrammarBoundsError` or :class:`GrammarSyntaxError` unless llama.cpp
    can safely parse ``text`` and build a sampler from it."""
    if limits is not LIMITS:
        measure_grammar(text, limits)
        return
    verdict = _verdict(text)
    if verdict is not None:
        kind, message = verdict
        raise kind(message)


@functools.lru_cache(maxsize=16)
def _verdict(text: str) -> tuple[type[ContextError], str] | None:
    """The refusal of ``text`` under :data:`LIMITS`, remembered: a conversation's grammar
    is checked for every turn (a sampler is built per reply), and a large one takes a
    fraction of a second to read."""
    try:
        measure_grammar(text)
    except (GrammarBoundsError, GrammarSyntaxError) as exc:
        return type(exc), str(exc)
    return None


def measure_grammar(text: str, limits: GrammarLimits = LIMITS) -> GrammarShape:
    """The :class:`GrammarShape` of ``text``; raises as :func:`check_grammar` does (the
    counting stops at the first limit passed)."""
    if len(text) > limits.max_chars:
        raise GrammarBoundsError(
            f"The grammar has {len(text):,} characters; at most {limits.max_chars:,}."
        )
    if "\x00" in text:
        # llama.cpp reads a C string: it would silently stop at the NUL.
        raise GrammarSyntaxError(
            "The grammar holds a NUL character (write \\x00 inside a literal instead)."
        )
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise GrammarSyntaxError(
            "The grammar holds a lone UTF-16 surrogate, which is not valid UTF-8."
        ) from None
    parser = _Parser(text, limits)
    parser.parse()
    rules = parser.rules
    if "root" not in parser.symbol_ids:
        raise GrammarSyntaxError("The grammar has no 'root' rule.")
    left_depth, left_steps = _left_recursion_check(rules, parser.sizes, parser, limits)
    ways = _max_ways(rules, parser, limits)
    return GrammarShape(
        chars=len(text),
        depth=parser.max_depth,
        left_depth=left_depth,
        left_steps=left_steps,
        rules=len(rules),
        elements=parser.n_elements,
        ways=ways,
    )
