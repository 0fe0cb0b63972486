"""The one definition of a shared prefix and of cached tokens (app/engine/prefix.py), and
the one spelling of the context-full policies (app/engine/context_policy.py)."""

from __future__ import annotations

import json

from app.engine.context_policy import ContextFullPolicy
from app.engine.prefix import cached_tokens, common_prefix


def test_common_prefix_of_lists_and_tuples_and_long_runs() -> None:
    assert common_prefix([1, 2, 3], [1, 2, 4]) == 2
    assert common_prefix((1, 2, 3), [1, 2, 3, 4]) == 3  # a tuple and a list compare alike
    assert common_prefix([], [1]) == 0
    long = list(range(1000))
    assert common_prefix(long, long) == 1000
    assert common_prefix(long, [*long[:700], -1, *long[701:]]) == 700  # past whole blocks


def test_cached_tokens_never_below_zero() -> None:
    assert cached_tokens(10, 4) == 6
    assert cached_tokens(4, 10) == 0


def test_policies_parse_their_words_only() -> None:
    assert ContextFullPolicy.parse("shift") is ContextFullPolicy.SHIFT
    assert ContextFullPolicy.parse(ContextFullPolicy.STOP) is ContextFullPolicy.STOP
    assert ContextFullPolicy.parse("drop") is None and ContextFullPolicy.parse(None) is None
    assert json.dumps(ContextFullPolicy.STOP) == '"stop"'  # a str enum: stored JSON keeps the word
