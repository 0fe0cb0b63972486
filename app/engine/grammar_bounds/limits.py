"""What a grammar may make llama.cpp do: the limits, the errors that name them, and the
shape :func:`~app.engine.grammar_bounds.measure_grammar` reports."""

from __future__ import annotations

from dataclasses import dataclass

from app.engine.errors import ContextError


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
