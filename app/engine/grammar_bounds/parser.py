"""``llama_grammar_parser::parse`` of the vendored ``src/llama-grammar.cpp``, ported without
recursion: it counts the depth, rules and elements llama.cpp would build and stops at the
first limit."""

from __future__ import annotations

from dataclasses import dataclass

from app.engine.grammar_bounds.limits import (
    _ALT,
    _END,
    _LLAMA_MAX_REPETITION,
    _QUANTIFIERS,
    _TERM,
    _UINT32_MAX,
    _UINT64_MAX,
    GrammarBoundsError,
    GrammarLimits,
    GrammarSyntaxError,
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
