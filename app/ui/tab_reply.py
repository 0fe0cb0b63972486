"""The reply a chat tab streams: its buffers and timing (:class:`ReplyBuffer`).

The text is buffered as it comes and painted by the window's flush timer, never per token.
A reasoning model's reply comes in two parts, its reasoning then its answer; both are kept
and shown apart. What is stored (and its :class:`~app.session.ReplyMeta`) is the session
recorder's: the tab reads the stored reply back when the turn ends.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from app.ui.message_widget import MessageWidget

# A reply with no new text for this long says so (a remote server that went quiet or
# away), instead of a speed that falls as the seconds pass.
QUIET_S = 2.0


class ReplyBuffer:
    """The streaming reply's text, reasoning and figures (see the module docstring)."""

    def __init__(self) -> None:
        self.reset()

    def reset(self, submitted_at: float = 0.0) -> None:
        """A new turn, sent at ``submitted_at`` (perf_counter)."""
        self.parts: list[str] = []
        self.reasoning_parts: list[str] = []
        self.reasoning_ms: float | None = None  # measured here when the answer starts
        self.dirty = False
        self.oldest_unpainted: float | None = None
        self.error: str | None = None
        self.gen_tokens = 0
        self.gen_started = 0.0
        self.submitted_at = submitted_at
        self.first_token_ms: float | None = None
        self.tok_s = 0.0
        self.last_text_at = 0.0  # perf_counter() of the last streamed text (0: none yet)
        # text completion: the document before the reply, shown with it in one widget
        self.prefix = ""

    def start(self) -> None:
        """The first streamed text: generation starts."""
        self.gen_started = time.perf_counter()
        self.first_token_ms = (self.gen_started - self.submitted_at) * 1000.0

    def add_reasoning(self, text: str, n_tokens: int, sampled_at: float) -> None:
        self.reasoning_parts.append(text)
        self._buffered(n_tokens, sampled_at)

    def add_answer(self, text: str, n_tokens: int, sampled_at: float) -> None:
        if self.reasoning_parts and self.reasoning_ms is None:
            self.reasoning_ms = (time.perf_counter() - self.gen_started) * 1000.0
        self.parts.append(text)
        self._buffered(n_tokens, sampled_at)

    def _buffered(self, n_tokens: int, sampled_at: float) -> None:
        self.gen_tokens += n_tokens
        self.last_text_at = time.perf_counter()
        self.dirty = True
        if self.oldest_unpainted is None:
            self.oldest_unpainted = sampled_at

    def settled(self) -> None:
        """The reply is finished or dropped: nothing is left to paint."""
        self.dirty = False
        self.oldest_unpainted = None

    def text(self) -> str:
        return "".join(self.parts)

    def reasoning_text(self) -> str:
        return "".join(self.reasoning_parts)

    def thinking_ms(self) -> float | None:
        """How long the reply has thought: until its answer started, else until now."""
        if not self.reasoning_parts:
            return None
        if self.reasoning_ms is not None:
            return self.reasoning_ms
        if not self.gen_started:
            return None
        return (time.perf_counter() - self.gen_started) * 1000.0

    def paint(self, widget: MessageWidget | None) -> float | None:
        """Paint the buffered text into ``widget``; returns the perf_counter time at which
        the oldest painted text was sampled, or None (nothing new)."""
        if not self.dirty:
            return None
        if widget is not None and self.prefix:
            widget.set_content(self.prefix + self.text())  # text completion: in place
        elif widget is not None:
            if self.reasoning_parts:
                widget.set_reply(self.text(), self.reasoning_text(), self.reasoning_ms)
            else:
                widget.set_content(self.text())
        self.dirty = False
        painted, self.oldest_unpainted = self.oldest_unpainted, None
        return painted

    def quiet_s(self) -> float:
        """Seconds since the last streamed text (0: none came yet)."""
        return time.perf_counter() - self.last_text_at if self.last_text_at else 0.0

    def measure_speed(self) -> None:
        if self.quiet_s() >= QUIET_S:
            return  # no text comes: a falling rate would say it still does
        elapsed = time.perf_counter() - self.gen_started
        if elapsed > 0.2:
            self.tok_s = self.gen_tokens / elapsed
