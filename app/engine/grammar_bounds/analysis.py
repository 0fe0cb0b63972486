"""What llama.cpp does with a parsed grammar when a sampler is built: its left-recursion
check (and what it costs) and the ways one place can begin (its "stacks")."""

from __future__ import annotations

from app.engine.grammar_bounds.limits import (
    _ALT,
    _END,
    GrammarBoundsError,
    GrammarLimits,
    GrammarSyntaxError,
)
from app.engine.grammar_bounds.parser import _Parser


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
