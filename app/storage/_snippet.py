"""Search snippets computed in Python from the message text.

FTS5's ``snippet()`` needs the query re-run per row, and for a prefix query that means
merging the doclists of every matching term each time (hundreds of ms for "the*" over
100,000 messages). Here: tokenize like FTS5's ``unicode61 remove_diacritics 2`` (runs of
letters and digits, case- and accent-folded), pick the window with the most distinct
query terms, and mark them.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter, deque
from functools import lru_cache

_TOKEN = re.compile(r"[^\W_]+")
_MAX_SCAN = 200_000  # characters of a message looked at for a snippet


@lru_cache(maxsize=4096)
def fold(token: str) -> str:
    """Lower-case without diacritics (as the FTS index sees a token)."""
    decomposed = unicodedata.normalize("NFKD", token)
    return "".join(ch for ch in decomposed if not unicodedata.combining(ch)).casefold()


def query_terms(words: list[str]) -> list[str]:
    """The folded tokens of the query words, in order."""
    return [fold(m.group()) for word in words for m in _TOKEN.finditer(word)]


def has_all_terms(text: str, terms: list[str], prefix: bool) -> bool:
    """Whether ``text`` holds every query term as a token (the last one as a token's start
    with ``prefix``), as the full-text index would match it."""
    if not terms:
        return False
    exact = set(terms if not prefix else terms[:-1])
    last = terms[-1] if prefix else None
    found = {_term(fold(m.group()), exact, last) for m in _TOKEN.finditer(text)}
    return set(terms) <= found


def _term(folded: str, exact: set[str], last: str | None) -> str | None:
    if folded in exact:
        return folded
    if last and folded.startswith(last):
        return last
    return None


def make_snippet(
    content: str,
    terms: list[str],
    prefix: bool,
    marks: tuple[str, str],
    width: int = 16,
    ellipsis: str = "…",
) -> str:
    """About ``width`` tokens of ``content`` around the best match, matches marked.
    With ``prefix`` the last term also matches tokens that start with it. The text is read
    only until a window holding every query term is found."""
    text = content[:_MAX_SCAN]
    exact = set(terms if not prefix else terms[:-1])
    last = terms[-1] if prefix and terms else None
    wanted = len(set(terms))
    tokens: list[tuple[int, int]] = []
    window: deque[tuple[int, str]] = deque()  # hits within the last ``width`` tokens
    counts: Counter[str] = Counter()
    best_start, best_count = 0, 0
    for match in _TOKEN.finditer(text):
        i = len(tokens)
        tokens.append(match.span())
        folded = fold(match.group())
        term = _term(folded, exact, last)
        if term is None:
            continue
        window.append((i, term))
        counts[term] += 1
        while window[0][0] <= i - width:
            _, old = window.popleft()
            counts[old] -= 1
            if not counts[old]:
                del counts[old]
        if len(counts) > best_count:
            best_count, best_start = len(counts), max(0, window[0][0] - width // 8)
            if best_count >= wanted:
                break
    if not tokens:
        return text[:200]
    # Read on a little so the window is full even when the best match came early.
    for match in _TOKEN.finditer(text, tokens[-1][1]):
        if len(tokens) >= best_start + width:
            break
        tokens.append(match.span())
    start = max(0, min(best_start, len(tokens) - width))
    end = min(len(tokens), start + width)
    out: list[str] = [ellipsis] if start > 0 else []
    cursor = tokens[start][0]
    for i in range(start, end):
        s, e = tokens[i]
        out.append(text[cursor:s])
        piece = text[s:e]
        hit = _term(fold(piece), exact, last) is not None
        out.append(f"{marks[0]}{piece}{marks[1]}" if hit else piece)
        cursor = e
    rest = text[cursor:]
    if _TOKEN.search(rest) or len(text) < len(content):
        out.append(ellipsis)
    else:
        out.append(rest)
    return "".join(out)
