"""Numbers in the window's sentences: a count with its noun, read right at 1 and at 1,000."""

from __future__ import annotations


def plural(n: int, word: str) -> str:
    """``n`` with thousands separators and ``word``, plural unless ``n`` is 1."""
    return f"{n:,} {word}" + ("" if n == 1 else "s")
