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


# Measured on llama.cpp 0.3.36 (x86-64 Linux, gcc -O3): a nested group costs about 400 bytes
# of C stack (an 8 MiB stack dies between 16,000 and 21,000 groups; a 1 MiB thread stack,
# what some platforms give threads, near 2,500), a left-recursion-check frame about 100. The
# limits keep a margin of at least 2.5 on a 1 MiB stack, and keep a JSON schema's grammar
# working up to ``maxLength``/``maxItems`` of about 1,000 (the converter nests one group per
# optional item). Building a sampler from 2,000,000 elements takes about a second.
LIMITS = GrammarLimits(
    max_chars=500_000,
    max_depth=1_000,
    max_left_depth=2_000,
    max_left_steps=20_000_000,
    max_rules=100_000,
    max_elements=2_000_000,
    max_ways=10_000,
)

# llama.cpp's MAX_REPETITION_THRESHOLD: the parser refuses more (gracefully).
_LLAMA_MAX_REPETITION = 2000
_UINT64_MAX = 2**64 - 1
_UINT32_MAX = 2**32 - 1

# S* is S{0,}, S+ is S{1,}, S? is S{0,1}
_QUANTIFIERS: dict[str, tuple[int, int | None]] = {"*": (0, None), "+": (1, None), "?": (0, 1)}

# Elements of a rule, as stored here: a rule reference is its rule id (>= 0); the rest are
# these markers. What the analyses need is only what llama.cpp branches on.
_TERM = -1  # CHAR, CHAR_NOT, CHAR_ANY, TOKEN, TOKEN_NOT: a terminal starts here
_MORE = -2  # CHAR_ALT, CHAR_RNG_UPPER: continues the terminal before it
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
    left_depth, left_steps = _left_recursion_check(rules, parser, limits)
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
        self.n_elements = 0  # elements in self.rules
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

    def _add_rule(self, rule_id: int, rule: list[int]) -> None:
        while len(self.rules) <= rule_id:
            self.rules.append([])
        self.n_elements += len(rule) - len(self.rules[rule_id])
        self.rules[rule_id] = rule

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
                frame.last_sym_start = len(rule)
                frame.n_prev_rules = 1
                count = 0
                while self._at(pos) != '"':
                    if pos >= n:
                        raise self._syntax("unexpected end of input", pos)
                    pos = self._char_end(pos)
                    count += 1
                self._grow(count, 0)
                rule.extend([_TERM] * count)
                self.n_elements += count
                pos = self._space(pos + 1, frame.nested)
            elif c == "[":
                pos += 1
                if self._at(pos) == "^":
                    pos += 1
                frame.last_sym_start = len(rule)
                frame.n_prev_rules = 1
                while self._at(pos) != "]":
                    if pos >= n:
                        raise self._syntax("unexpected end of input", pos)
                    pos = self._char_end(pos)
                    count = 1
                    if self._at(pos) == "-" and self._at(pos + 1) != "]":
                        if pos + 1 >= n:
                            raise self._syntax("unexpected end of input", pos + 1)
                        pos = self._char_end(pos + 1)
                        count = 2
                    self._grow(count, 0)
                    first = frame.last_sym_start == len(rule)
                    rule.append(_TERM if first else _MORE)
                    if count == 2:
                        rule.append(_MORE)
                    self.n_elements += count
                pos = self._space(pos + 1, frame.nested)
            elif c in ("<", "!"):
                if c == "!":
                    pos += 1
                pos = self._token_end(pos)
                self._grow(1, 0)
                frame.last_sym_start = len(rule)
                frame.n_prev_rules = 1
                rule.append(_TERM)
                self.n_elements += 1
                pos = self._space(pos, frame.nested)
            elif c and self._is_word(c):
                name_end = self._name_end(pos)
                ref = self._symbol(src[pos:name_end])
                pos = self._space(name_end, frame.nested)
                self._grow(1, 0)
                frame.last_sym_start = len(rule)
                frame.n_prev_rules = 1
                rule.append(ref)
                self.n_elements += 1
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
                self._grow(1, 0)
                frame.last_sym_start = len(rule)
                frame.n_prev_rules = 1
                rule.append(_TERM)
                self.n_elements += 1
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
                self.n_elements += 1
                pos = self._space(pos + 1, True)
                frame.last_sym_start = len(rule)
                frame.n_prev_rules = 1
            else:
                # the end of this parse_alternates
                self._grow(1, 0)
                rule.append(_END)
                self.n_elements += 1
                # the rule's elements are counted already; _add_rule counts a replaced one
                self.n_elements -= len(rule)
                self._grow(0, 1)
                self._add_rule(frame.rule_id, rule)
                if not frames:
                    return pos
                inner = frame
                frame = frames.pop()
                frame.n_prev_rules = max(1, len(self.symbol_ids) - inner.symbols_before)
                self._grow(1, 0)
                frame.last_sym_start = len(frame.rule)
                frame.rule.append(inner.rule_id)
                self.n_elements += 1
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
        copies = (low - 1) * len(prev) if low > 0 else -len(prev)
        self._grow(copies + n_opt * (len(prev) + 3) + (1 if n_opt > 0 else 0), n_opt)
        if low == 0:
            del rule[start:]
        else:
            for _ in range(low - 1):
                rule.extend(prev)
        self.n_elements += copies
        last_rec = 0
        for i in range(n_opt):
            rec_id = self._generated(self.rule_name)
            rec = list(prev)
            if i > 0 or no_max:
                rec.append(rec_id if no_max else last_rec)
            rec.extend((_ALT, _END))
            self._grow(0, 1)
            self._add_rule(rec_id, rec)
            last_rec = rec_id
        if n_opt > 0:
            rule.append(last_rec)
            self.n_elements += 1
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


def _rule_name(parser: _Parser, rule_id: int) -> str:
    names = {v: k for k, v in parser.symbol_ids.items()}
    return names.get(rule_id, f"#{rule_id}")


def _left_recursive(parser: _Parser, rule_id: int) -> GrammarSyntaxError:
    return GrammarSyntaxError(
        f"The grammar is left-recursive at the rule '{_rule_name(parser, rule_id)}' (a rule "
        "that can begin with itself), which llama.cpp cannot use."
    )


def _left_recursion_check(
    rules: list[list[int]], parser: _Parser, limits: GrammarLimits
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
            steps[index] = min(cap, len(rules[index]) + sum(steps[c] for c in calls[index]))
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
    """The most ways one position of the grammar can begin: the stacks one advance of
    ``llama_grammar_advance_stack`` can make from it, llama.cpp's parses kept side by side
    (an upper bound: llama.cpp also merges stacks that two paths make alike). For a position
    p, T(p) counts the stacks that end at a terminal and P(p) says whether p can reach the
    end of its alternative (then the stack below goes on; every such path gives the same
    stack). A reference to R followed by q: T = sum T(alt) + (P(R) ? T(q) : 0), P = P(R) and
    P(q). A position that depends on itself is left recursion that llama.cpp's own check
    misses (it looks only for literally empty alternatives): its advance would not end."""
    cap = limits.max_ways + 1
    # the start of each alternative of each rule
    starts: list[list[int]] = []
    for rule in rules:
        alt_starts = [0]
        for i, element in enumerate(rule):
            if element == _ALT:
                alt_starts.append(i + 1)
        starts.append(alt_starts)
    too_many = GrammarBoundsError(
        f"The grammar can begin at one place in more than {limits.max_ways:,} ways (each "
        f"one a parse llama.cpp keeps and checks against every token); at most "
        f"{limits.max_ways:,}."
    )
    # T and P per (rule, index), computed on demand with an explicit stack
    done: dict[tuple[int, int], tuple[int, int]] = {}
    active: set[tuple[int, int]] = set()
    worst = 0

    def after(rule: list[int], i: int) -> int:
        """The index of the element after the one at i."""
        j = i + 1
        while j < len(rule) and rule[j] == _MORE:
            j += 1
        return j

    for rule_index, rule in enumerate(rules):
        for i in range(len(rule)):
            if rule[i] == _MORE or (rule_index, i) in done:
                continue
            todo: list[tuple[int, int]] = [(rule_index, i)]
            while todo:
                key = todo[-1]
                if key in done:
                    todo.pop()
                    continue
                r, k = key
                element = rules[r][k]
                if element in (_ALT, _END):
                    done[key] = (0, 1)
                    todo.pop()
                    continue
                if element == _TERM:
                    done[key] = (1, 0)
                    todo.pop()
                    continue
                needed = [(element, s) for s in starts[element]]
                missing = [d for d in needed if d not in done]
                p_sum = 0
                nxt = (r, after(rules[r], k))
                if not missing:
                    p_sum = max(done[d][1] for d in needed)
                    if p_sum and nxt not in done:
                        missing = [nxt]  # only a reference that may be empty goes on to q
                if missing:
                    active.add(key)
                    for d in missing:
                        if d in active:
                            raise _left_recursive(parser, d[0])
                        todo.append(d)
                    continue
                active.discard(key)
                t_sum = min(cap, sum(done[d][0] for d in needed))
                t_next, p_next = done[nxt] if p_sum else (0, 0)
                t = min(cap, t_sum + p_sum * t_next)
                p = p_sum * p_next  # 0 or 1
                done[key] = (t, p)
                worst = max(worst, t, p)
                if worst > limits.max_ways:
                    raise too_many
                todo.pop()
    # a reference to a rule (and the start of the root) begins with each of its alternatives
    for rule_index, alt_starts in enumerate(starts):
        for j in (0, 1):
            ways = (sum if j == 0 else max)(done[(rule_index, s)][j] for s in alt_starts)
            worst = max(worst, ways)
            if worst > limits.max_ways:
                raise too_many
    return worst
