"""Reading a reply that is still arriving: each reader either finishes, says the text ended
too soon (:class:`NeedMore`: wait for more) or that the text cannot be what it expects
(:class:`NoMatch`). A reader never consumes text it is unsure of, so re-reading a longer
buffer gives the same answer for what was already decided."""

from __future__ import annotations

import json
import re
from typing import Any, Final

__all__ = [
    "NAME_CHARS",
    "Cursor",
    "NeedMore",
    "NoMatch",
    "ScanMemo",
    "stable_prefix",
]

NAME_CHARS: Final = re.compile(r"[A-Za-z0-9_.\-]")
_ID_CHARS: Final = re.compile(r"[A-Za-z0-9_\-]")
_WS: Final = re.compile(r"\s*")
_WS_SPLIT: Final = re.compile(r"(\s+)")
_NUMBER: Final = re.compile(r"-?(0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?")


class NeedMore(Exception):
    """The text ended inside what is being read."""


class NoMatch(Exception):
    """The text is not what is being read."""


def stable_prefix(text: str, closer: str) -> str:
    """``text`` without a trailing part that may yet turn out to begin ``closer`` or to be
    whitespace that is stripped at the end."""
    for n in range(min(len(closer), len(text)), 0, -1):
        if closer.startswith(text[-n:]):
            text = text[:-n]
            break
    return text.rstrip()


class Cursor:
    """A position in the text read so far."""

    def __init__(self, text: str, pos: int = 0, memo: ScanMemo | None = None) -> None:
        self.text = text
        self.pos = pos
        self.memo = memo

    def at_end(self) -> bool:
        return self.pos >= len(self.text)

    def skip_ws(self) -> None:
        match = _WS.match(self.text, self.pos)
        self.pos = match.end() if match else self.pos

    def peek(self) -> str:
        """The next character after whitespace (NeedMore at the end)."""
        self.skip_ws()
        if self.at_end():
            raise NeedMore
        return self.text[self.pos]

    def literal(self, lit: str) -> None:
        """Read ``lit``; any whitespace run in it matches any run in the text, and
        whitespace before it is skipped."""
        self.skip_ws()
        for part in _WS_SPLIT.split(lit):
            if not part:
                continue
            if part.isspace():
                self.skip_ws()
                continue
            have = self.text[self.pos : self.pos + len(part)]
            if not part.startswith(have):
                raise NoMatch
            if len(have) < len(part):
                raise NeedMore
            self.pos += len(part)
        if lit and lit[-1].isspace() and self.at_end():
            raise NeedMore  # more whitespace may follow

    def try_literal(self, lit: str) -> bool:
        """Read ``lit`` if it is next; False (nothing read) if it is not."""
        start = self.pos
        try:
            self.literal(lit)
        except NoMatch:
            self.pos = start
            return False
        return True

    def word(self, chars: re.Pattern[str] = NAME_CHARS) -> str:
        """A non-empty run of ``chars`` (after whitespace), ended by another character."""
        self.skip_ws()
        start = self.pos
        while self.pos < len(self.text) and chars.match(self.text, self.pos):
            self.pos += 1
        if self.at_end():
            raise NeedMore
        if self.pos == start:
            raise NoMatch
        return self.text[start : self.pos]

    def call_id(self) -> str:
        return self.word(_ID_CHARS)

    def until(self, closer: str) -> str:
        """The text up to ``closer`` (whitespace-trimmed), reading past the closer."""
        end = self.text.find(closer.strip(), self.pos)
        if end < 0:
            raise NeedMore
        value = self.text[self.pos : end]
        self.pos = end
        self.literal(closer.strip())
        return value.strip()

    def json_value(self) -> tuple[int, Any]:
        """Read one JSON value: (its start, the value)."""
        self.skip_ws()
        start = self.pos
        end = json_value_end(self.text, start, self.memo)
        try:
            value = json.loads(self.text[start:end])
        except ValueError:
            raise NoMatch from None
        self.pos = end
        return start, value


# A JSON text as structure and runs: whole strings, brackets, and anything else.
_JSON_PARTS: Final = re.compile(r'"(?:[^"\\]++|\\.)*+"|[{}\[\]]|[^"{}\[\]]++', re.S)
# The rest of a string whose opening quote was read, and the part of one that is complete.
_STRING_REST: Final = re.compile(r'(?:[^"\\]++|\\.)*+"', re.S)
_STRING_SO_FAR: Final = re.compile(r'(?:[^"\\]++|\\.)*+', re.S)

# Where the scan of a JSON value starting at an offset stopped for want of text: the text
# it had read, the position it reached, the bracket depth there and whether that is inside
# a string, so that re-reading a longer buffer resumes instead of starting over.
ScanMemo = dict[int, tuple[str, int, int, bool]]


def json_value_end(text: str, pos: int, memo: ScanMemo | None = None) -> int:
    """Where the JSON value starting at ``pos`` ends (its syntax is checked when parsed)."""
    if pos >= len(text):
        raise NeedMore
    first = text[pos]
    if first in "{[":
        i, depth, in_string = pos, 0, False
        saved = memo.get(pos) if memo is not None else None
        if saved is not None and text.startswith(saved[0]):
            i, depth, in_string = saved[1], saved[2], saved[3]
        while True:
            if in_string:
                rest = _STRING_REST.match(text, i)
                if rest is None:
                    i = _STRING_SO_FAR.match(text, i).end()  # type: ignore[union-attr]
                    break
                i, in_string = rest.end(), False
                continue
            if i >= len(text):
                break
            if text[i] == '"':
                i, in_string = i + 1, True
                continue
            match = _JSON_PARTS.match(text, i)
            assert match is not None  # anything but a quote matches
            part = match.group()
            if part in ("{", "["):
                depth += 1
            elif part in ("}", "]"):
                depth -= 1
                if depth == 0:
                    return match.end()
            i = match.end()
        if memo is not None:
            memo[pos] = (text[:i], i, depth, in_string)
        raise NeedMore
    if first == '"':
        return _string_end(text, pos)
    if first == "-" or first.isdigit():
        match = _NUMBER.match(text, pos)
        if match is None:
            raise NeedMore if len(text) - pos < 2 else NoMatch
        if match.end() >= len(text):
            raise NeedMore  # more digits may follow
        return match.end()
    for word in ("true", "false", "null"):
        have = text[pos : pos + len(word)]
        if word.startswith(have):
            if len(have) < len(word):
                raise NeedMore
            return pos + len(word)
    raise NoMatch


def _string_end(text: str, pos: int) -> int:
    i = pos + 1
    while i < len(text):
        c = text[i]
        if c == "\\":
            i += 2
            continue
        if c == '"':
            return i + 1
        i += 1
    raise NeedMore
