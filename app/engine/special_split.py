"""Special tokens found in Python before llama.cpp tokenizes long texts.

llama.cpp's ``tokenizer_st_partition`` walks its fragment list from the start for every
special token it finds (``std::distance`` and ``std::next`` on a ``forward_list``), so a
text holding many special tokens costs quadratic time: 80,000 characters of ``<s>x`` take
8.5 s on a 8k-vocabulary model, and a prompt that fits a 128k context takes minutes, all on
the engine thread. :func:`partition` gives the same fragments in linear time (a byte map of
what is already claimed, and C-speed ``bytes.find``); the model then tokenizes each plain
fragment on its own, which is what llama.cpp does after its partition too.

The result must be token for token llama.cpp's: the order of tokens (longest text first),
which tokens take part (control and unknown ones only with ``parse_special``), the
left/right whitespace stripping of ``LSTRIP``/``RSTRIP`` tokens and the leftmost,
non-overlapping search within each fragment are all the same. llama.cpp sorts tokens of
equal length with ``std::sort``, whose order among them is unspecified; where two such
tokens occur in one text and could overlap, :func:`partition` answers ``None`` and the
caller lets llama.cpp do the whole text.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

# llama_token_attr bits (llama.h)
ATTR_UNKNOWN = 1 << 0
ATTR_CONTROL = 1 << 3
ATTR_USER_DEFINED = 1 << 4
ATTR_LSTRIP = 1 << 7
ATTR_RSTRIP = 1 << 8
SPECIAL_ATTRS = ATTR_CONTROL | ATTR_USER_DEFINED | ATTR_UNKNOWN

# Below this many bytes llama.cpp's own partition is quick enough (and exact by definition).
LONG_TEXT = 8192

# C's isspace() in the "C" locale, which llama.cpp's stripping uses.
_SPACE = frozenset(b" \t\n\v\f\r")


@dataclass(frozen=True, slots=True)
class SpecialToken:
    id: int
    text: bytes
    attr: int


@dataclass(frozen=True, slots=True)
class SpecialTokens:
    """The vocabulary's ``cache_special_tokens``: longest text first."""

    tokens: tuple[SpecialToken, ...]

    @classmethod
    def of(cls, tokens: Sequence[SpecialToken]) -> SpecialTokens:
        kept = [t for t in tokens if t.text and t.attr & SPECIAL_ATTRS]
        # sorted() is stable: ties keep id order (llama.cpp's order among them is
        # unspecified, which partition() guards against).
        return cls(tuple(sorted(kept, key=lambda t: -len(t.text))))


Fragment = bytes | int  # plain text to tokenize, or a special token's id


def partition(data: bytes, special: SpecialTokens, parse_special: bool) -> list[Fragment] | None:
    """``data`` cut as llama.cpp's ``tokenizer_st_partition`` cuts it, or ``None`` where
    the order of equal-length tokens could change the result."""
    present = [
        t
        for t in special.tokens
        if (parse_special or not t.attr & (ATTR_CONTROL | ATTR_UNKNOWN)) and t.text in data
    ]
    if not present:
        return [data] if data else []
    if _order_matters(present):
        return None
    n = len(data)
    claimed = bytearray(n)  # 1 where a token or a stripped space is
    starts: dict[int, SpecialToken] = {}
    for token in present:
        text, size = token.text, len(token.text)
        pos = data.find(text)
        while pos >= 0:
            taken = claimed.find(1, pos, pos + size)
            if taken >= 0:
                # An occurrence over a claimed byte lies across fragments: look again
                # past the claimed run (any start before it would cover that byte).
                free = claimed.find(0, taken)
                if free < 0:
                    break
                pos = data.find(text, free)
                continue
            claimed[pos : pos + size] = b"\x01" * size
            starts[pos] = token
            if token.attr & ATTR_LSTRIP:
                i = pos - 1
                while i >= 0 and not claimed[i] and data[i] in _SPACE:
                    claimed[i] = 1
                    i -= 1
            end = pos + size
            if token.attr & ATTR_RSTRIP:
                while end < n and not claimed[end] and data[end] in _SPACE:
                    claimed[end] = 1
                    end += 1
            pos = data.find(text, end)
    out: list[Fragment] = []
    at = 0
    for pos in sorted(starts):
        _plain(data, claimed, at, pos, out)
        token = starts[pos]
        out.append(token.id)
        at = pos + len(token.text)
    _plain(data, claimed, at, n, out)
    return out


def _plain(data: bytes, claimed: bytearray, start: int, end: int, out: list[Fragment]) -> None:
    """The unclaimed run between two tokens (stripped spaces only ever sit at its ends)."""
    first = claimed.find(0, start, end)
    if first >= 0:
        last = claimed.rfind(0, start, end)
        out.append(data[first : last + 1])


def _order_matters(present: list[SpecialToken]) -> bool:
    """Whether two tokens of the same length could compete for the same bytes (one's end
    is the other's start), or strip spaces that the other one holds. Linear in the tokens
    times their length (a hostile text may hold thousands of a vocabulary's specials)."""
    by_size: dict[int, list[bytes]] = {}
    for t in present:
        by_size.setdefault(len(t.text), []).append(t.text)
    for size, group in by_size.items():
        if len(group) < 2:
            continue
        starts: dict[bytes, int] = {}  # each proper prefix: how many tokens begin with it
        for text in group:
            if any(b in _SPACE for b in text):
                return True
            for k in range(1, size):
                starts[text[:k]] = starts.get(text[:k], 0) + 1
        for text in group:
            for k in range(1, size):
                n = starts.get(text[-k:], 0)
                # another token begins with this one's end (its own prefix does not count)
                if n > 1 or (n == 1 and text[:k] != text[-k:]):
                    return True
    return False
