"""Tokenizing on a caller's own thread, and refusing a text too long before tokenizing it all.

The engine's thread steps every conversation's decode, so a large input must not be
tokenized there: llama.cpp's tokenizer only reads the vocabulary, so any thread may call
it while the model is loaded. :class:`VocabLease` makes "while the model is loaded" hold:
tokenizing threads hold the lease, and :meth:`Model.close` retires it (waiting for them)
before it frees the vocabulary.

:func:`tokenize_bounded` tokenizes a long text in pieces and stops as soon as the pieces
prove that the whole is longer than the limit, so an 8 MiB text is refused after reading
what the context could hold, not after seconds of tokenizing all of it.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Protocol

from app.engine.errors import EngineError


class Model(Protocol):
    """What tokenizing needs of :class:`app.engine.model.Model` (a protocol, so that the
    model can hold its lease without the two modules importing each other)."""

    lease: VocabLease
    handle: Any

    def tokenize(
        self, text: str, add_special: bool = ..., parse_special: bool = ...
    ) -> list[int]: ...

    def detokenize(self, tokens: list[int], special: bool = ...) -> str: ...


# A text longer than this (and than its limit) is first counted in pieces of this size,
# cut at a space where the window has one. Small, because llama.cpp's SentencePiece
# tokenizer is quadratic in a run without spaces (16k characters: 0.05 s, 200k: 14 s).
PIECE_CHARS = 1 << 14
# A piece tokenized apart can differ from the same text inside the whole by a token or
# two at each cut (a word or a space prefix split in two); that many are not counted.
SLACK_PER_CUT = 2


class ModelGoneError(EngineError):
    """The model was unloaded while (or before) a thread tokenized with it."""

    def __init__(self) -> None:
        super().__init__("The model was unloaded; retry when a model is loaded.")


class TextTooLongError(EngineError):
    """A text has more tokens than allowed; ``at_least`` is a lower bound of its count."""

    def __init__(self, at_least: int, limit: int) -> None:
        self.at_least = at_least
        self.limit = limit
        super().__init__(f"The text has at least {at_least:,} tokens; at most {limit:,} fit.")


class VocabLease:
    """Threads using a model's vocabulary, and the model's free that waits for them."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._users = 0
        self._retired = False

    @contextmanager
    def hold(self) -> Iterator[None]:
        """The vocabulary stays valid inside; :class:`ModelGoneError` once retired."""
        with self._cond:
            if self._retired:
                raise ModelGoneError
            self._users += 1
        try:
            yield
        finally:
            with self._cond:
                self._users -= 1
                if self._users == 0:
                    self._cond.notify_all()

    def retire(self) -> None:
        """Refuse new holders and wait until the current ones are done (a bounded
        tokenization: well under a second)."""
        with self._cond:
            self._retired = True
            while self._users:
                self._cond.wait()


def pieces(text: str, size: int = PIECE_CHARS) -> Iterator[str]:
    """``text`` cut into pieces of at most ``size`` characters, each cut just before a
    space in the second half of its window (so a word stays whole), else at ``size``."""
    start = 0
    while len(text) - start > size:
        end = start + size
        cut = max(text.rfind(" ", start + size // 2, end), text.rfind("\n", start + size // 2, end))
        if cut <= start:
            cut = end
        yield text[start:cut]
        start = cut
    yield text[start:]


def tokenize_bounded(
    model: Model, text: str, limit: int, *, add_special: bool, parse_special: bool
) -> list[int]:
    """``text``'s tokens on the calling thread; :class:`TextTooLongError` when it has more
    than ``limit``, found after tokenizing little more than ``limit`` tokens' worth of it.
    :class:`ModelGoneError` when the model was unloaded."""
    with model.lease.hold():
        if not model.handle:
            raise ModelGoneError
        if len(text) > max(PIECE_CHARS, limit):
            counted = cuts = 0
            for i, piece in enumerate(pieces(text)):
                counted += len(
                    model.tokenize(
                        piece, add_special=add_special and i == 0, parse_special=parse_special
                    )
                )
                cuts = i
                if counted - cuts * SLACK_PER_CUT > limit:
                    raise TextTooLongError(counted - cuts * SLACK_PER_CUT, limit)
            # Within the slack of the limit: the exact count decides.
        tokens = model.tokenize(text, add_special=add_special, parse_special=parse_special)
    if len(tokens) > limit:
        raise TextTooLongError(len(tokens), limit)
    return tokens


def detokenize_off_thread(model: Model, tokens: list[int], special: bool) -> str:
    """:meth:`Model.detokenize` on the calling thread, safe against an unload."""
    with model.lease.hold():
        if not model.handle:
            raise ModelGoneError
        return model.detokenize(tokens, special)
