"""What a :class:`~app.session.Session` reports: frozen dataclasses, never dicts.

Conversation events go to that conversation's subscribers (``Session.subscribe``);
session events to ``Session.subscribe_session``. Callbacks run on the session thread.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from app.engine.reasoning import Channel
from app.session.recorder import ReplyMeta
from app.session.types import ConversationId, LoadedModel, RestoreOutcome, TurnId, TurnResult

if TYPE_CHECKING:  # storage is imported only by clients that keep a database
    from app.storage import Message

# ---------------------------------------------------------------- per conversation


@dataclass(frozen=True)
class TurnStarted:
    conversation_id: ConversationId
    turn_id: TurnId
    n_to_process: int  # prompt tokens to decode (after what the cache holds)


@dataclass(frozen=True)
class PromptProgressed:
    conversation_id: ConversationId
    turn_id: TurnId
    done: int
    total: int


@dataclass(frozen=True)
class TextStreamed:
    """Streamed text of one channel (pieces are coalesced for a few milliseconds)."""

    conversation_id: ConversationId
    turn_id: TurnId
    text: str
    channel: Channel  # REASONING before the answer, then ANSWER
    n_tokens: int
    sampled_at: float  # perf_counter() when the oldest piece was sampled


@dataclass(frozen=True)
class ToolCallStreamed:
    """A tool call in the streaming reply: the first event of a call (``index`` new) has
    its ``call_id`` and ``name`` and no ``fragment``; the next ones append ``fragment`` to
    its arguments (JSON text that only grows). Text before it was handed out first. The
    complete calls are in the turn's ``TurnResult.tool_calls``."""

    conversation_id: ConversationId
    turn_id: TurnId
    index: int
    call_id: str = ""
    name: str = ""
    fragment: str = ""


@dataclass(frozen=True)
class TurnFinished:
    conversation_id: ConversationId
    turn_id: TurnId
    result: TurnResult


@dataclass(frozen=True)
class TurnFailed:
    """Something went wrong in this conversation (a TurnFinished follows for a turn)."""

    conversation_id: ConversationId
    message: str


@dataclass(frozen=True)
class ContextShifted:
    conversation_id: ConversationId
    n_discarded: int


@dataclass(frozen=True)
class SequenceStatus:
    """The context meter and residency of a conversation's sequence.

    What the model sees: ``n_tokens`` held (and queued), plus ``n_reserved`` cells kept free
    for the reply, out of ``n_ctx`` (the window's meter shows both parts). The
    first ``n_dropped`` messages after the system prompt are no longer in the context (the
    window marks where the kept ones start).
    """

    conversation_id: ConversationId
    n_tokens: int
    n_ctx: int
    resident: bool
    busy: bool
    generating: bool
    n_reserved: int = 0  # the reply's reserve (what is left of it while generating)
    n_dropped: int = 0  # leading messages after the system prompt left out of the context


@dataclass(frozen=True)
class CacheRestored:
    """The sequence was opened: how its cache came back."""

    conversation_id: ConversationId
    outcome: RestoreOutcome
    reason: str | None = None  # why a saved cache was refused (REREAD)


@dataclass(frozen=True)
class CacheParked:
    """The sequence left memory to make room (evicted); ``saved``: its state file was written."""

    conversation_id: ConversationId
    saved: bool


@dataclass(frozen=True)
class ConversationForked:
    conversation_id: ConversationId
    source: ConversationId
    n_tokens: int  # tokens taken over from the source's cache (0: processed from text)


@dataclass(frozen=True)
class ConversationClosed:
    conversation_id: ConversationId


@dataclass(frozen=True)
class ReplyStored:
    """A recorded turn's reply as stored when it ended (just before its ``TurnFinished``):
    the message, its figures typed (:class:`~app.session.recorder.ReplyMeta`, never the
    stored meta's keys) and its place among its siblings (1-based index, count); a client
    shows it without reading it back. ``message`` None: the reply failed empty and was
    dropped."""

    conversation_id: ConversationId
    turn_id: TurnId
    message: Message | None
    meta: ReplyMeta
    sibling_index: int = 1
    sibling_count: int = 1


ConversationEvent = (
    TurnStarted
    | PromptProgressed
    | TextStreamed
    | ToolCallStreamed
    | TurnFinished
    | TurnFailed
    | ContextShifted
    | SequenceStatus
    | CacheRestored
    | CacheParked
    | ConversationForked
    | ConversationClosed
    | ReplyStored
)

# ---------------------------------------------------------------- session-wide


@dataclass(frozen=True)
class ModelLoadProgress:
    path: str
    fraction: float


@dataclass(frozen=True)
class ModelLoaded:
    model: LoadedModel
    warning: str | None = None  # e.g. the saved settings did not suit: defaults were used


@dataclass(frozen=True)
class ModelLoadFailed:
    path: str
    message: str
    cancelled: bool = False


@dataclass(frozen=True)
class ModelUnloaded:
    pass


@dataclass(frozen=True)
class Reconfigured:
    model: LoadedModel


@dataclass(frozen=True)
class ReconfigureFailed:
    message: str


@dataclass(frozen=True)
class BusyChanged:
    message: str  # a long operation is running ("" when done)


@dataclass(frozen=True)
class MemoryStats:
    tok_s: float  # total generation speed of the last seconds
    busy: int  # conversations generating
    model_bytes: int = 0
    kv_bytes: int = 0
    kv_tokens_held: int = 0
    n_ctx: int = 0
    loaded: bool = False


@dataclass(frozen=True)
class SessionError:
    message: str


@dataclass(frozen=True)
class ShutdownComplete:
    pass


@dataclass(frozen=True)
class ConversationStored:
    """A client other than the session's own recorder (the API server) created a
    conversation's row or stored a turn in it: a list of conversations shows the new row,
    or refreshes its title and time, without a restart."""

    conversation_id: int
    created: bool  # True: the row is new


SessionEvent = (
    ModelLoadProgress
    | ModelLoaded
    | ModelLoadFailed
    | ModelUnloaded
    | Reconfigured
    | ReconfigureFailed
    | BusyChanged
    | MemoryStats
    | SessionError
    | ShutdownComplete
    | ConversationStored
)
