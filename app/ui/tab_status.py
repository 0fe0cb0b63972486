"""A chat tab's status line in words: its state, the context meter's text and tooltips.

Pure functions of the tab's state (:class:`TabState`) and of its :class:`TabFigures` (what
the session's events said of the conversation: tokens held, context size, room kept for
the reply, restore outcomes; each event is applied as it is, typed, by
:meth:`TabFigures.apply`). What an idle tab says about its cache is a :class:`CacheNote`;
the state label's text and its tooltip both come from that note, never one from the other.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import Enum

from app.engine.chat_fit import reply_reserve
from app.session import RestoreOutcome
from app.session import events as ev
from app.ui.wording import plural

# A restore refusal's reason is cut to this length (it would fill the status line).
RESTORE_REASON_CHARS = 90


class TabState(Enum):
    """What a chat tab does."""

    IDLE = "idle"
    QUEUED = "queued"  # sent, waiting for the session to start the turn
    PROMPT = "prompt"  # the prompt is being processed
    GENERATING = "generating"  # the reply streams


class CacheNote(Enum):
    """What an idle tab says about its conversation's cache (from the session's figures)."""

    NONE = "none"
    ON_DISK = "on_disk"  # saved to disk, out of the context
    RESTORED = "restored"  # read back from disk when the tab opened
    PARKED = "parked"  # saved, waiting for room in the context
    REREAD = "reread"  # the saved cache could not be used: the text is read again


# The session's events about a conversation's sequence and cache (the figures they set).
StatusEvent = ev.SequenceStatus | ev.CacheRestored | ev.CacheParked | ev.ConversationForked


@dataclass(frozen=True)
class TabFigures:
    """What the session said of the tab's conversation (``n_ctx`` 0: no model)."""

    n_tokens: int = 0  # held in the context (and queued)
    n_ctx: int = 0
    n_reserved: int = 0  # cells kept free for the reply
    n_dropped: int = 0  # the oldest messages after the system prompt no longer seen
    resident: bool = False
    busy: bool = False
    generating: bool = False
    restored: bool | None = None  # the cache came back from disk (None: not opened yet)
    parked: str | None = None  # why it waits for room in the context
    restore_error: str | None = None  # why the saved cache was refused (re-read)
    on_disk: bool = False  # saved, out of the context
    forked: bool = False  # opened as a fork of another conversation's cache
    engine: str = ""  # which machine answers when not this one (app.ui.engines_models)

    def apply(self, event: StatusEvent) -> TabFigures:
        """These figures after ``event``."""
        match event:
            case ev.SequenceStatus():
                return replace(
                    self,
                    n_tokens=event.n_tokens,
                    n_ctx=event.n_ctx,
                    n_reserved=event.n_reserved,
                    n_dropped=event.n_dropped,
                    resident=event.resident,
                    busy=event.busy,
                    generating=event.generating,
                    on_disk=self.on_disk and not event.resident,
                )
            case ev.CacheRestored():
                outcome = event.outcome
                return replace(
                    self,
                    restored=outcome is RestoreOutcome.RESTORED,
                    parked=event.reason if outcome is RestoreOutcome.PARKED else None,
                    restore_error=event.reason if outcome is RestoreOutcome.REREAD else None,
                )
            case ev.CacheParked():
                return replace(self, resident=False, on_disk=event.saved)
            case ev.ConversationForked():
                return replace(self, forked=True)

    def unloaded(self) -> TabFigures:
        """No model any more: nothing is held."""
        return replace(self, n_tokens=0, n_ctx=0, resident=False)

    def turn_started(self) -> TabFigures:
        """What happened when the tab opened is old news once it has answered."""
        return replace(self, restored=None, parked=None, restore_error=None)

    def restore_used(self) -> TabFigures:
        """A turn ran on the restored cache: that it came from disk is not news now."""
        return replace(self, restored=None)

    def restore_unused(self, n_to_process: int) -> bool:
        """Whether a turn that re-reads ``n_to_process`` tokens did without the restored
        cache: it re-reads at least half of what the cache held (old messages dropped,
        another system prompt...), so "restored from disk" no longer says what happened."""
        return bool(self.restored) and n_to_process * 2 >= self.n_tokens


def cache_note(info: TabFigures) -> CacheNote:
    """The note of ``info`` (the first that applies, in this order)."""
    if info.on_disk:
        return CacheNote.ON_DISK
    if info.restored:
        return CacheNote.RESTORED
    if info.parked:
        return CacheNote.PARKED
    if info.restore_error:
        return CacheNote.REREAD
    return CacheNote.NONE


def state_text(
    state: TabState, prompt: tuple[int, int], tok_s: float, info: TabFigures, quiet_s: float = 0.0
) -> str:
    """What the tab does in words, and which machine answers where not this one
    (``quiet_s``: how long the streaming reply has had no new text, when that is long)."""
    words = _state_words(state, prompt, tok_s, info)
    if state is TabState.GENERATING and quiet_s:
        words = f"waiting for text: none for {int(quiet_s)} s"
    return f"{words} · {info.engine}" if info.engine else words


def _state_words(state: TabState, prompt: tuple[int, int], tok_s: float, info: TabFigures) -> str:
    """What the tab does in words (``prompt``: the prompt's tokens done and in all)."""
    match state:
        case TabState.QUEUED:
            return "waiting…"
        case TabState.PROMPT:
            done, total = prompt
            percent = int(100 * done / total) if total else 0
            return f"processing prompt {percent}%"
        case TabState.GENERATING:
            return f"generating at {tok_s:.1f} tok/s" if tok_s else "generating"
    match cache_note(info):
        case CacheNote.ON_DISK:
            return "idle · saved to disk"
        case CacheNote.RESTORED:
            return "idle · cache restored from disk"
        case CacheNote.PARKED:
            # saved, waiting for room in the context: it comes back when this chat is used
            return "idle · cache waiting for room (restored when you send)"
        case CacheNote.REREAD:
            reason = str(info.restore_error).strip()
            if len(reason) > RESTORE_REASON_CHARS:
                reason = reason[: RESTORE_REASON_CHARS - 1].rstrip() + "…"
            return f"idle · cache re-processed: {reason}"
    return "idle"


def state_tip(state: TabState, info: TabFigures) -> str:
    """The state label's tooltip (why the cache is read again or waits; else none)."""
    if state is not TabState.IDLE:
        return ""
    match cache_note(info):
        case CacheNote.REREAD:
            return (
                "The saved cache of this conversation could not be used, so its text is read "
                f"again (information, nothing is lost): {info.restore_error}"
            )
        case CacheNote.PARKED:
            return (
                "This conversation's cache is saved on disk; the context is busy with other "
                f"chats, so it is restored when you next send here: {info.parked}"
            )
    return ""


@dataclass(frozen=True)
class MeterFigures:
    """The context meter's figures (``n_ctx`` 0: no model)."""

    n: int  # the conversation's tokens in the context
    reserved: int  # the room kept for the reply
    n_ctx: int
    dropped: int  # the oldest messages that no longer fit
    # about how many tokens the chat has when none of it is in the cache yet (an imported
    # chat, a chat after a model switch): it is read at the next send (0: none to say)
    uncached: int = 0
    about: bool = False  # ``n`` is an estimate (a reply streams on an engine that says none)

    @classmethod
    def of(
        cls,
        info: TabFigures,
        estimate: int = 0,
        max_tokens: int | None = None,
        streamed: int = 0,
        estimate_only: bool = False,
    ) -> MeterFigures:
        """``estimate``: the chat's tokens, about (said only while the cache holds none).
        ``max_tokens``: the conversation's reply limit, for the reserve the next reply keeps
        where the engine has not fitted a turn yet (a reopened chat, a new tab).
        ``streamed``: the tokens of the reply streaming now (0: none). ``estimate_only``:
        the held count is out of date (a message was deleted): the chat's, about."""
        if estimate_only and info.n_ctx:
            return cls(estimate, 0, info.n_ctx, info.n_dropped, about=True)
        if streamed and info.n_tokens == 0 and info.n_ctx:
            # an engine that says its figures only when the turn ends (a remote one): the
            # chat and the reply so far, about, rather than "not cached yet" all along
            return cls(estimate + streamed, 0, info.n_ctx, info.n_dropped, about=True)
        uncached = estimate if info.n_tokens == 0 and info.n_ctx else 0
        reserved = info.n_reserved
        if not reserved and not info.generating and info.n_ctx and not info.engine:
            # the engine's reserve is set when it fits a turn: until then the next
            # reply's is the same rule's (a remote engine keeps none of its own)
            reserved = reply_reserve(max_tokens, info.n_ctx)
        return cls(info.n_tokens, reserved, info.n_ctx, info.n_dropped, uncached)

    def text(self, compact: bool) -> str:
        """The meter label (``compact``: a narrow window)."""
        n, reserved, n_ctx = self.n, self.reserved, self.n_ctx
        if self.about:
            return f"~{n:,}/{n_ctx:,}" if compact else f"~{n:,} / {n_ctx:,} tokens"
        if self.uncached:
            about = f"~{self.uncached:,}/{n_ctx:,}"
            return about if compact else f"~{self.uncached:,} / {n_ctx:,} tokens · not cached yet"
        if compact:
            # What the model sees: the held tokens and the room kept for the reply.
            used = min(n_ctx, n + reserved)
            return f"{used:,}/{n_ctx:,}"
        if reserved:
            return f"{n:,} / {n_ctx:,} tokens · {reserved:,} kept for the reply"
        return f"{n:,} / {n_ctx:,} tokens"

    def tip(self) -> str:
        """The meter's and its label's tooltip."""
        if self.about:
            return (
                f"About {tokens_text(self.n)} of the context of {self.n_ctx:,}, with the "
                "reply so far (an estimate: the engine says its count when the reply ends)."
            )
        if self.uncached:
            return (
                f"This conversation has about {tokens_text(self.uncached)} (an estimate), none "
                f"of them in the context of {self.n_ctx:,} yet: they are read when you next "
                "send."
            )
        tip = f"{self.n:,} tokens of this conversation are in the context of {self.n_ctx:,}"
        if self.reserved:
            tip += f", and {self.reserved:,} are kept free for the reply"
        if self.dropped:
            tip += (
                f". The {self.dropped:,} oldest messages no longer fit: the model does not "
                "see them (the system prompt is kept)"
            )
        return tip + "."


def tokens_text(n: int) -> str:
    """A count of tokens that reads right: "1 token", "6,144 tokens"."""
    return plural(n, "token")


def room_text(n_ctx: int, reserve: int) -> str:
    """What of the context a message may take, without contradicting itself (the room
    kept for the reply is named only when there is some)."""
    if reserve <= 0:
        return f"its {tokens_text(n_ctx)}"
    return f"{n_ctx - reserve:,} of its {tokens_text(n_ctx)}, {reserve:,} kept for the reply"
