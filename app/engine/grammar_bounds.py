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
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from app.engine.errors import ContextError

__all__ = [
    "LIMITS",
    "GrammarBoundsError",
    "GrammarLimits",
    "GrammarShape",
    "GrammarSyntaxError",
    "check_grammar",
    "measure_grammar",
]


@dataclass(frozen=True)
class GrammarLimits:
    """What a grammar may make llama.cpp do (measured: see tests/engine/test_grammars.py and
    the comments on :data:`LIMITS`)."""

    max_chars: int  # characters of GBNF text
    max_depth: int  # groups nested in groups (the parser's recursion)
    max_left_depth: int  # rule references at a rule's start, one inside the next
    max_left_steps: int  # elements the left-recursion check reads (it re-reads shared rules)
    max_rules: int  # rules after repetitions are expanded
    max_elements: int  # grammar elements (8 bytes each) after repetitions are expanded
    max_ways: int  # ways one position can begin (stacks made by one advance)


# Measured on llama.cpp 0.3.36 as vendored (x86-64 Linux; tests/engine/test_grammars.py keeps
# the crash and the margin as tests). Nested groups: about 430 bytes of C stack each; the
# parser dies (SIGSEGV) between 18,000 and 20,000 on an 8 MiB stack, between 2,000 and 2,500
# on a 1 MiB thread stack, between 1,000 and 1,300 on 512 KiB. Rules that begin with rules:
# about 100 bytes each, dying between 60,000 and 100,000 (8 MiB) and 8,000 and 12,000 (1 MiB).
# So depth 1,000 and left depth 2,000 hold on any stack of 1 MiB or more (2x and 4x margins;
# 18x and 30x on Linux's 8 MiB), and keep a JSON schema's grammar working up to
# ``maxLength``/``maxItems`` 1,000 (the converter nests one group per optional item).
# Build time: 2,000,000 rules of "a"{0,2000} take llama.cpp 5.6 s, 200,000 take 0.7 s; 58,000
# alternatives of a start (its stacks, deduplicated by a linear search) 32 s, 4,000 0.25 s;
# a left-recursion check that re-reads shared rules 2**20 times did not end in 20 s. What
# binds first is this reading in Python: 25,000 rules take it about 1.5 s on a loaded
# machine (load 9 on 2 cores), llama.cpp 0.1 s; a verdict is remembered (:func:`_verdict`).
LIMITS = GrammarLimits(
    max_chars=500_000,
    max_depth=1_000,
    max_left_depth=2_000,
    max_left_steps=20_000_000,
    max_rules=25_000,
    max_elements=1_000_000,
    max_ways=4_000,
)

# llama.cpp's MAX_REPETITION_THRESHOLD: the parser refuses more (gracefully).
_LLAMA_MAX_REPETITION = 2000
_UINT64_MAX = 2**64 - 1
_UINT32_MAX = 2**32 - 1

# S* is S{0,}, S+ is S{1,}, S? is S{0,1}
_QUANTIFIERS: dict[str, tuple[int, int | None]] = {"*": (0, None), "+": (1, None), "?": (0, 1)}

# Symbols of a rule, as stored here: a rule reference is its rule id (>= 0); the rest are
# these markers. What the analyses need is only what llama.cpp branches on, so a literal or a
# character class is one _TERM however many elements llama.cpp gives it (the real counts are
# kept beside: _Parser.sizes, _Frame.size).
_TERM = -1  # CHAR..., TOKEN, TOKEN_NOT: a terminal
_ALT = -3
_END = -4


class GrammarBoundsError(ContextError):
    """A grammar beyond one of :data:`LIMITS` (the message names it)."""


class GrammarSyntaxError(ContextError):
    """A grammar llama.cpp would not parse (the message says where)."""


@dataclass(frozen=True)
class GrammarShape:
    """What llama.cpp would build from a grammar."""

    chars: int
    depth: int
    left_depth: int
    left_steps: int
    rules: int
    elements: int
    ways: int


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


class _Parser:
    """``llama_grammar_parser::parse`` without recursion: a group's enclosing sequence waits
    on an explicit stack, so the depth is counted, not spent."""

    def __init__(self, text: str, limits: GrammarLimits) -> None:
        self.src = text
        self.limits = limits
        self.symbol_ids: dict[str, int] = {}
        self.rules: list[list[int]] = []
        self.sizes: list[int] = []  # llama.cpp's elements in each rule
        self.n_elements = 0  # llama.cpp's elements in all rules, those being built included
        self.max_depth = 0
        self.rule_name = ""  # the rule being parsed: generated symbols are named after it

    # -- errors and positions ---------------------------------------------------------

    def _where(self, pos: int) -> str:
        line = self.src.count("\n", 0, pos) + 1
        column = pos - (self.src.rfind("\n", 0, pos) + 1) + 1
        return f"line {line}, column {column}"

    def _syntax(self, what: str, pos: int) -> GrammarSyntaxError:
        return GrammarSyntaxError(f"The grammar is not valid GBNF: {what} at {self._where(pos)}.")

    def _at(self, pos: int) -> str:
        return self.src[pos] if pos < len(self.src) else ""

    # -- lexical helpers (parse_space, parse_name, parse_int, parse_char) --------------

    def _space(self, pos: int, newline_ok: bool) -> int:
        src = self.src
        n = len(src)
        while pos < n:
            c = src[pos]
            if c == "#":
                while pos < n and src[pos] not in "\r\n":
                    pos += 1
            elif c in " \t" or (newline_ok and c in "\r\n"):
                pos += 1
            else:
                break
        return pos

    @staticmethod
    def _is_word(c: str) -> bool:
        return ("a" <= c <= "z") or ("A" <= c <= "Z") or ("0" <= c <= "9") or c == "-"

    def _name_end(self, pos: int) -> int:
        end = pos
        while end < len(self.src) and self._is_word(self.src[end]):
            end += 1
        if end == pos:
            raise self._syntax("expecting a name", pos)
        return end

    def _int_end(self, pos: int) -> int:
        end = pos
        while end < len(self.src) and "0" <= self.src[end] <= "9":
            end += 1
        if end == pos:
            raise self._syntax("expecting an integer", pos)
        return end

    def _number(self, pos: int, end: int, most: int) -> int:
        digits = self.src[pos:end]
        # int() refuses over 4,300 digits; llama.cpp's stoull anything over 64 bits.
        if len(digits) > 20 or int(digits) > most:
            raise self._syntax("number too large", pos)
        return int(digits)

    def _char_end(self, pos: int) -> int:
        src = self.src
        if pos >= len(src):
            raise self._syntax("unexpected end of input", pos)
        if src[pos] != "\\":
            return pos + 1
        escape = self._at(pos + 1)
        size = {"x": 2, "u": 4, "U": 8}.get(escape)
        if size is not None:
            hex_digits = src[pos + 2 : pos + 2 + size]
            if len(hex_digits) != size or any(
                c not in "0123456789abcdefABCDEF" for c in hex_digits
            ):
                raise self._syntax(f"expecting {size} hex characters", pos + 2)
            return pos + 2 + size
        if escape in ("t", "r", "n", "\\", '"', "[", "]", "-"):
            return pos + 2
        raise self._syntax("unknown escape", pos)

    # -- symbols and rules ------------------------------------------------------------

    def _symbol(self, name: str) -> int:
        return self.symbol_ids.setdefault(name, len(self.symbol_ids))

    def _generated(self, base: str) -> int:
        # generate_symbol_id: assigns (and may overwrite a user's "base_N"), as llama.cpp does.
        next_id = len(self.symbol_ids)
        self.symbol_ids[f"{base}_{next_id}"] = next_id
        return next_id

    def _grow(self, elements: int, rules: int) -> None:
        """Count what is about to be built; refuse it before building it."""
        if self.n_elements + elements > self.limits.max_elements:
            raise GrammarBoundsError(
                "The grammar expands to more than "
                f"{self.limits.max_elements:,} elements once its repetitions are written out; "
                f"at most {self.limits.max_elements:,}."
            )
        if len(self.rules) + rules > self.limits.max_rules:
            raise GrammarBoundsError(
                f"The grammar expands to more than {self.limits.max_rules:,} rules once its "
                f"repetitions are written out; at most {self.limits.max_rules:,}."
            )

    def _add_rule(self, rule_id: int, rule: list[int], size: int) -> None:
        while len(self.rules) <= rule_id:
            self.rules.append([])
            self.sizes.append(0)
        self.n_elements += size - self.sizes[rule_id]
        self.rules[rule_id] = rule
        self.sizes[rule_id] = size

    def _symbol_added(self, frame: _Frame, symbol: int, size: int) -> None:
        """One symbol of ``size`` elements at the end of the open sequence."""
        self._grow(size, 0)
        frame.last_sym_start = len(frame.rule)
        frame.tail_size = size
        frame.n_prev_rules = 1
        frame.rule.append(symbol)
        frame.size += size
        self.n_elements += size

    # -- the grammar ------------------------------------------------------------------

    def parse(self) -> None:
        pos = self._space(0, True)
        while pos < len(self.src):
            pos = self._rule(pos)
        names = {rule_id: name for name, rule_id in self.symbol_ids.items()}
        for rule_id, rule in enumerate(self.rules):
            if not rule:
                name = names.get(rule_id)
                which = f"the rule '{name}' is" if name is not None else "a rule is"
                raise GrammarSyntaxError(
                    f"The grammar is not valid GBNF: {which} used but never defined."
                )
        for rule in self.rules:
            for element in rule:
                if element >= 0 and (element >= len(self.rules) or not self.rules[element]):
                    name = names.get(element)
                    if name is not None:
                        raise GrammarSyntaxError(
                            f"The grammar is not valid GBNF: the rule '{name}' is used but "
                            "never defined."
                        )

    def _rule(self, pos: int) -> int:
        name_end = self._name_end(pos)
        name = self.src[pos:name_end]
        after = self._space(name_end, False)
        rule_id = self._symbol(name)
        if self.src[after : after + 3] != "::=":
            raise self._syntax("expecting ::=", after)
        pos = self._alternates(self._space(after + 3, True), name, rule_id)
        c = self._at(pos)
        if c == "\r":
            pos += 2 if self._at(pos + 1) == "\n" else 1
        elif c == "\n":
            pos += 1
        elif c:
            raise self._syntax("expecting newline or end", pos)
        return self._space(pos, True)

    def _alternates(self, pos: int, rule_name: str, rule_id: int) -> int:
        """parse_alternates of a rule, with every nested group's parse_alternates and
        parse_sequence run on the explicit stack ``frames``."""
        self.rule_name = rule_name
        frames: list[_Frame] = []
        frame = _Frame(rule_id=rule_id, nested=False, rule=[], symbols_before=0)
        frame.last_sym_start = 0
        src = self.src
        n = len(src)
        while True:
            # the body of parse_sequence's loop, for the innermost open sequence
            c = src[pos] if pos < n else ""
            rule = frame.rule
            if c == '"':
                pos += 1
                count = 0
                while self._at(pos) != '"':
                    if pos >= n:
                        raise self._syntax("unexpected end of input", pos)
                    pos = self._char_end(pos)
                    count += 1
                if count:
                    self._symbol_added(frame, _TERM, count)
                else:  # "" adds nothing (a quantifier after it has no item)
                    frame.last_sym_start = len(rule)
                    frame.tail_size = 0
                    frame.n_prev_rules = 1
                pos = self._space(pos + 1, frame.nested)
            elif c == "[":
                pos += 1
                if self._at(pos) == "^":
                    pos += 1
                count = 0
                while self._at(pos) != "]":
                    if pos >= n:
                        raise self._syntax("unexpected end of input", pos)
                    pos = self._char_end(pos)
                    count += 1
                    if self._at(pos) == "-" and self._at(pos + 1) != "]":
                        if pos + 1 >= n:
                            raise self._syntax("unexpected end of input", pos + 1)
                        pos = self._char_end(pos + 1)
                        count += 1
                if count:
                    self._symbol_added(frame, _TERM, count)
                else:  # [] adds nothing, as "" does
                    frame.last_sym_start = len(rule)
                    frame.tail_size = 0
                    frame.n_prev_rules = 1
                pos = self._space(pos + 1, frame.nested)
            elif c in ("<", "!"):
                if c == "!":
                    pos += 1
                pos = self._token_end(pos)
                self._symbol_added(frame, _TERM, 1)
                pos = self._space(pos, frame.nested)
            elif c and self._is_word(c):
                name_end = self._name_end(pos)
                ref = self._symbol(src[pos:name_end])
                pos = self._space(name_end, frame.nested)
                self._symbol_added(frame, ref, 1)
            elif c == "(":
                opened = pos
                pos = self._space(pos + 1, True)
                symbols_before = len(self.symbol_ids)
                sub_id = self._generated(rule_name)
                frames.append(frame)
                if len(frames) > self.limits.max_depth:
                    raise GrammarBoundsError(
                        f"The grammar nests groups more than {self.limits.max_depth:,} deep "
                        f"(at {self._where(opened)}); at most {self.limits.max_depth:,}."
                    )
                self.max_depth = max(self.max_depth, len(frames))
                frame = _Frame(rule_id=sub_id, nested=True, rule=[], symbols_before=symbols_before)
                frame.last_sym_start = 0
            elif c == ".":
                self._symbol_added(frame, _TERM, 1)
                pos = self._space(pos + 1, frame.nested)
            elif c in ("*", "+", "?"):
                pos = self._space(pos + 1, frame.nested)
                self._repeat(frame, *_QUANTIFIERS[c], pos)
            elif c == "{":
                pos = self._space(pos + 1, frame.nested)
                if not ("0" <= self._at(pos) <= "9"):
                    raise self._syntax("expecting an integer", pos)
                int_end = self._int_end(pos)
                low = self._number(pos, int_end, _UINT64_MAX)
                pos = self._space(int_end, frame.nested)
                high: int | None = None  # no upper bound
                if self._at(pos) == "}":
                    high = low
                    pos = self._space(pos + 1, frame.nested)
                elif self._at(pos) == ",":
                    pos = self._space(pos + 1, frame.nested)
                    if "0" <= self._at(pos) <= "9":
                        int_end = self._int_end(pos)
                        high = self._number(pos, int_end, _UINT64_MAX)
                        pos = self._space(int_end, frame.nested)
                    if self._at(pos) != "}":
                        raise self._syntax("expecting '}'", pos)
                    pos = self._space(pos + 1, frame.nested)
                else:
                    raise self._syntax("expecting ','", pos)
                if low > _LLAMA_MAX_REPETITION:
                    raise self._syntax(
                        f"a repetition of more than {_LLAMA_MAX_REPETITION:,} times", pos
                    )
                if high is not None and high < low:
                    # llama.cpp computes high - low unsigned: 2**64 rules, built until memory
                    # runs out
                    raise GrammarBoundsError(
                        f"The grammar repeats an item {{{low},{high}}} times, at most fewer "
                        f"times than at least (at {self._where(pos)}); the most must be at "
                        "least the least."
                    )
                if high is not None and high > _LLAMA_MAX_REPETITION:
                    high = None  # what llama.cpp does: no upper bound
                self._repeat(frame, low, high, pos)
            elif c == "|":
                # parse_alternates: the sequence ended; another one follows
                self._grow(1, 0)
                rule.append(_ALT)
                frame.size += 1
                self.n_elements += 1
                pos = self._space(pos + 1, True)
                frame.last_sym_start = len(rule)
                frame.tail_size = 0
                frame.n_prev_rules = 1
            else:
                # the end of this parse_alternates
                self._grow(1, 0)
                rule.append(_END)
                frame.size += 1
                # the rule's elements are counted already; _add_rule counts them again
                self.n_elements -= frame.size - 1
                self._grow(0, 1)
                self._add_rule(frame.rule_id, rule, frame.size)
                if not frames:
                    return pos
                inner = frame
                frame = frames.pop()
                self._symbol_added(frame, inner.rule_id, 1)
                frame.n_prev_rules = max(1, len(self.symbol_ids) - inner.symbols_before)
                if self._at(pos) != ")":
                    raise self._syntax("expecting ')'", pos)
                pos = self._space(pos + 1, frame.nested)

    def _token_end(self, pos: int) -> int:
        """parse_token: ``<[id]>`` or ``<text>`` (whether the text is one token of the
        vocabulary is llama.cpp's to say)."""
        if self._at(pos) != "<":
            raise self._syntax("expecting '<'", pos)
        pos += 1
        if self._at(pos) == "[":
            int_end = self._int_end(pos + 1)
            self._number(pos + 1, int_end, _UINT32_MAX)
            if self._at(int_end) != "]":
                raise self._syntax("expecting ']'", int_end)
            if self._at(int_end + 1) != ">":
                raise self._syntax("expecting '>'", int_end + 1)
            return int_end + 2
        end = self.src.find(">", pos)
        if end < 0:
            raise self._syntax("expecting '>'", len(self.src))
        return end + 1

    def _repeat(self, frame: _Frame, low: int, high: int | None, pos: int) -> None:
        """handle_repetitions: S{m,n} -> S (m times) then n-m nested optional rules."""
        rule = frame.rule
        start = frame.last_sym_start
        if start == len(rule):
            raise self._syntax("expecting an item before */+/?/{", pos)
        prev = rule[start:]
        prev_size = frame.tail_size
        no_max = high is None
        total = 1
        if high is not None and high > 0:
            total = high
        elif low > 0:
            total = low
        if frame.n_prev_rules * total > _LLAMA_MAX_REPETITION:
            raise self._syntax(
                "a repetition of a repetition beyond llama.cpp's bound of "
                f"{_LLAMA_MAX_REPETITION:,} rules",
                pos,
            )
        n_opt = 1 if high is None else high - low
        copies = (low - 1) * prev_size if low > 0 else -prev_size
        self._grow(copies + n_opt * (prev_size + 3) + (1 if n_opt > 0 else 0), n_opt)
        if low == 0:
            del rule[start:]
        else:
            for _ in range(low - 1):
                rule.extend(prev)
        self.n_elements += copies
        frame.size += copies
        last_rec = 0
        for i in range(n_opt):
            rec_id = self._generated(self.rule_name)
            rec = list(prev)
            if i > 0 or no_max:
                rec.append(rec_id if no_max else last_rec)
            rec.extend((_ALT, _END))
            self._grow(0, 1)
            self._add_rule(rec_id, rec, prev_size + len(rec) - len(prev))
            last_rec = rec_id
        if n_opt > 0:
            rule.append(last_rec)
            self.n_elements += 1
            frame.size += 1
        frame.tail_size = low * prev_size + (1 if n_opt > 0 else 0)
        frame.n_prev_rules *= total


@dataclass
class _Frame:
    """One open parse_sequence: the rule it builds and the state of its loop."""

    rule_id: int
    nested: bool
    rule: list[int]
    symbols_before: int
    last_sym_start: int = 0
    n_prev_rules: int = 1
    size: int = 0  # llama.cpp's elements in ``rule``
    tail_size: int = 0  # ... in ``rule[last_sym_start:]``, what a quantifier repeats


def _rule_name(parser: _Parser, rule_id: int) -> str:
    names = {v: k for k, v in parser.symbol_ids.items()}
    return names.get(rule_id, f"#{rule_id}")


def _left_recursive(parser: _Parser, rule_id: int) -> GrammarSyntaxError:
    return GrammarSyntaxError(
        f"The grammar is left-recursive at the rule '{_rule_name(parser, rule_id)}' (a rule "
        "that can begin with itself), which llama.cpp cannot use."
    )


def _left_recursion_check(
    rules: list[list[int]], sizes: list[int], parser: _Parser, limits: GrammarLimits
) -> tuple[int, int]:
    """What llama_grammar_detect_left_recursion does, as llama_grammar_init_impl runs it on
    every rule: (its deepest recursion, the rule elements it reads). It calls itself on each
    reference at the start of an alternative, and on the next one while the rules before
    may be empty (have an empty alternative), without remembering rules it has checked
    within one call: a rule reached two ways is read twice. Computed here per rule, once."""
    n = len(rules)
    may_be_empty = [False] * n
    for index, rule in enumerate(rules):
        at_start = True
        for element in rule:
            if element in (_ALT, _END):
                if at_start:
                    may_be_empty[index] = True
                    break
                at_start = True
            else:
                at_start = False
    calls: list[list[int]] = []
    for rule in rules:
        refs = []
        recurse = True
        for element in rule:
            if element >= 0 and recurse:
                refs.append(element)
                recurse = may_be_empty[element]
            elif element in (_ALT, _END):
                recurse = True
            else:
                recurse = False
        calls.append(refs)
    cap = limits.max_left_steps + 1
    depth = [0] * n
    steps = [0] * n
    state = [0] * n  # 0 new, 1 on the path, 2 done
    for first in range(n):
        if state[first]:
            continue
        path = [first]
        state[first] = 1
        while path:
            index = path[-1]
            pending = next((c for c in calls[index] if state[c] != 2), None)
            if pending is not None:
                if state[pending] == 1:
                    raise _left_recursive(parser, pending)
                state[pending] = 1
                path.append(pending)
                if len(path) > limits.max_left_depth:
                    raise GrammarBoundsError(
                        "The grammar's rules begin with other rules more than "
                        f"{limits.max_left_depth:,} deep; at most {limits.max_left_depth:,}."
                    )
                continue
            path.pop()
            state[index] = 2
            depth[index] = 1 + max((depth[c] for c in calls[index]), default=0)
            steps[index] = min(cap, sizes[index] + sum(steps[c] for c in calls[index]))
    # llama_grammar_init_impl starts a check at each rule no earlier check reached
    reached = [False] * n
    total = 0
    deepest = 0
    for first in range(n):
        if reached[first]:
            continue
        total = min(cap, total + steps[first])
        deepest = max(deepest, depth[first])
        todo = [first]
        reached[first] = True
        while todo:
            for c in calls[todo.pop()]:
                if not reached[c]:
                    reached[c] = True
                    todo.append(c)
    if deepest > limits.max_left_depth:
        raise GrammarBoundsError(
            "The grammar's rules begin with other rules more than "
            f"{limits.max_left_depth:,} deep; at most {limits.max_left_depth:,}."
        )
    if total > limits.max_left_steps:
        raise GrammarBoundsError(
            "The grammar's rules begin with other rules in so many ways that llama.cpp's "
            f"left-recursion check would read more than {limits.max_left_steps:,} elements; "
            f"at most {limits.max_left_steps:,}."
        )
    return deepest, total


def _max_ways(rules: list[list[int]], parser: _Parser, limits: GrammarLimits) -> int:
    """The most ways one place of the grammar can begin: the stacks one advance of
    ``llama_grammar_advance_stack`` makes from it, llama.cpp's parses kept side by side (an
    upper bound: llama.cpp also merges stacks that two paths make alike).

    T(x) counts the stacks that end at a terminal, P(x) says whether x may be empty (every
    empty path gives the same stack: the one below). A reference to R followed by the rest
    q of its alternative: T = T(R) + (P(R) ? T(q) : 0), P = P(R) and P(q); T(R) sums its
    alternatives. First T and P of each rule's start (a rule waits for the rules it begins
    with; one that waits on itself is left recursion that llama.cpp's own check misses, as
    it looks only for literally empty alternatives, and its advance would not end), then
    every place inside the rules, right to left."""
    cap = limits.max_ways + 1
    n = len(rules)
    t_start = [0] * n
    p_start = [0] * n
    state = [0] * n  # 0 new, 1 waiting on a rule it begins with, 2 done
    cursor = [0] * n  # where the scan of a waiting rule resumes
    partial = [0] * n  # T summed so far by that scan
    nullable = [0] * n  # an alternative seen so far may be empty
    for first in range(n):
        if state[first]:
            continue
        state[first] = 1
        path = [first]
        while path:
            r = path[-1]
            rule = rules[r]
            i, t, p = cursor[r], partial[r], nullable[r]
            waiting = -1
            while i < len(rule):
                element = rule[i]
                if element in (_ALT, _END):  # an alternative ended with all of it empty
                    p = 1
                    i += 1
                    continue
                if element >= 0:
                    if state[element] == 1:
                        raise _left_recursive(parser, element)
                    if state[element] == 0:
                        waiting = element
                        break
                    t = min(cap, t + t_start[element])
                    if p_start[element]:
                        i += 1
                        continue
                else:
                    t = min(cap, t + 1)
                while rule[i] not in (_ALT, _END):  # the rest of this alternative
                    i += 1
                i += 1
            cursor[r], partial[r], nullable[r] = i, t, p
            if waiting >= 0:
                state[waiting] = 1
                path.append(waiting)
                continue
            t_start[r], p_start[r], state[r] = t, p, 2
            path.pop()
    worst = max(t_start, default=0)
    for rule in rules:
        t_next, p_next = 0, 1
        for element in reversed(rule):
            if element in (_ALT, _END):
                t_next, p_next = 0, 1
            elif element < 0:
                t_next, p_next = 1, 0
            else:
                empty = p_start[element]
                t_next = min(cap, t_start[element] + (t_next if empty else 0))
                p_next = p_next if empty else 0
                worst = max(worst, t_next)
    if worst > limits.max_ways:
        raise GrammarBoundsError(
            f"The grammar can begin at one place in more than {limits.max_ways:,} ways "
            f"(each one a parse llama.cpp keeps and checks against every token); at most "
            f"{limits.max_ways:,}."
        )
    return worst
