"""Numbers in the window's sentences: a count with its noun, read right at 1 and at 1,000;
help texts written for the command line, as the window shows them."""

from __future__ import annotations

import re

_CODE = re.compile(r"`([^`\n]+)`")


def shown_help(text: str) -> str:
    """A settings help text for the window: its `commands` (Markdown, for --help and the
    docs) in quotes, not raw backticks."""
    return _CODE.sub("“\\1”", text)


def plural(n: int, word: str) -> str:
    """``n`` with thousands separators and ``word``, plural unless ``n`` is 1."""
    return f"{n:,} {word}" + ("" if n == 1 else "s")
