"""What a cache already holds of a prompt: one definition of the shared prefix, and of the
cached-token count every client reports (the window's "cached", the API's
``cached_tokens`` and llama-server's ``cache_n``)."""

from __future__ import annotations

from collections.abc import Sequence

_BLOCK = 256  # conversations share thousands of tokens: compare slices before single ones


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """How many leading tokens ``a`` and ``b`` share (lists or tuples alike)."""
    if type(a) is not type(b):  # a list never equals a tuple: compare one shape
        a, b = tuple(a), tuple(b)
    n = min(len(a), len(b))
    i = 0
    while i + _BLOCK <= n and a[i : i + _BLOCK] == b[i : i + _BLOCK]:
        i += _BLOCK
    while i < n and a[i] == b[i]:
        i += 1
    return i


def cached_tokens(n_prompt: int, n_prompt_processed: int) -> int:
    """The prompt tokens a turn took from the cache: those of its prompt it did not decode."""
    return max(0, n_prompt - n_prompt_processed)
