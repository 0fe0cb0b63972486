"""A chat tab's status line in words: its state, the context meter's text and tooltips.

Pure functions of the tab's state and of its ``info`` (the session's figures for the
conversation: tokens held, context size, room kept for the reply, restore outcomes).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# A restore refusal's reason is cut to this length (it would fill the status line).
RESTORE_REASON_CHARS = 90


def state_text(state: str, prompt: tuple[int, int], tok_s: float, info: dict[str, Any]) -> str:
    """What the tab does (``state``: queued, prompt, generating or idle) in words."""
    if state == "queued":
        return "waiting…"
    if state == "prompt":
        done, total = prompt
        percent = int(100 * done / total) if total else 0
        return f"processing prompt {percent}%"
    if state == "generating":
        return f"generating at {tok_s:.1f} tok/s" if tok_s else "generating"
    if info.get("on_disk"):
        return "idle · saved to disk"
    if info.get("restored"):
        return "idle · cache restored from disk"
    if info.get("parked"):
        # saved, waiting for room in the context: it comes back when this chat is used
        return "idle · cache waiting for room (restored when you send)"
    reason = info.get("restore_error")
    if reason:
        reason = str(reason).strip()
        if len(reason) > RESTORE_REASON_CHARS:
            reason = reason[: RESTORE_REASON_CHARS - 1].rstrip() + "…"
        return f"idle · cache re-processed: {reason}"
    return "idle"


def state_tip(info: dict[str, Any], text: str) -> str:
    """The state label's tooltip for its ``text`` (why the cache is re-read or waits)."""
    reason = info.get("restore_error")
    parked = info.get("parked")
    if reason and "re-processed" in text:
        return (
            "The saved cache of this conversation could not be used, so its text is read "
            f"again (information, nothing is lost): {reason}"
        )
    if parked and "waiting for room" in text:
        return (
            "This conversation's cache is saved on disk; the context is busy with other "
            f"chats, so it is restored when you next send here: {parked}"
        )
    return ""


@dataclass(frozen=True)
class MeterFigures:
    """The context meter's figures (``n_ctx`` 0: no model)."""

    n: int  # the conversation's tokens in the context
    reserved: int  # the room kept for the reply
    n_ctx: int
    dropped: int  # the oldest messages that no longer fit

    @classmethod
    def of(cls, info: dict[str, Any]) -> MeterFigures:
        return cls(
            int(info.get("n_tokens", 0)),
            int(info.get("n_reserved", 0)),
            int(info.get("n_ctx", 0)),
            int(info.get("n_dropped", 0)),
        )

    def text(self, compact: bool) -> str:
        """The meter label (``compact``: a narrow window)."""
        n, reserved, n_ctx = self.n, self.reserved, self.n_ctx
        if compact:
            # What the model sees: the held tokens and the room kept for the reply.
            used = min(n_ctx, n + reserved)
            return f"{used:,}/{n_ctx:,}"
        if reserved:
            return f"{n:,} / {n_ctx:,} tokens · {reserved:,} kept for the reply"
        return f"{n:,} / {n_ctx:,} tokens"

    def tip(self) -> str:
        """The meter's and its label's tooltip."""
        tip = f"{self.n:,} tokens of this conversation are in the context of {self.n_ctx:,}"
        if self.reserved:
            tip += f", and {self.reserved:,} are kept free for the reply"
        if self.dropped:
            tip += (
                f". The {self.dropped:,} oldest messages no longer fit: the model does not "
                "see them (the system prompt is kept)"
            )
        return tip + "."
