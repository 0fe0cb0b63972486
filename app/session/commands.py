"""What a :class:`~app.session.Session` is asked to do: frozen dataclasses on its queue.

The ``Session`` methods build and enqueue these; a client may also ``Session.post`` one.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from app.engine import ContextSettings, SamplingParams
from app.engine.chat_template import ReasoningOptions
from app.engine.settings import ModelSettings
from app.engine.tool_calls.request import ToolRequest
from app.session.events import CacheRestored
from app.session.types import (
    ChatMessage,
    ContextFullPolicy,
    ConversationId,
    ConversationSnapshot,
    RecordedTurn,
    TurnId,
)

if TYPE_CHECKING:
    from app.engine import Engine


@dataclass(frozen=True)
class LoadModel:
    path: str
    settings: ContextSettings
    default_policy: ContextFullPolicy = ContextFullPolicy.SHIFT
    fallback: bool = True  # settings the model refuses: load with the defaults (else fail)
    model_settings: ModelSettings | None = None  # per-model choices (its chat template)


@dataclass(frozen=True)
class UnloadModel:
    pass


@dataclass(frozen=True)
class OpenConversation:
    """Bind a conversation to a sequence, restoring its state file when one exists."""

    conversation_id: ConversationId
    policy: ContextFullPolicy | None = None


@dataclass(frozen=True)
class CloseConversation:
    conversation_id: ConversationId
    save: bool = True  # write its state file first


@dataclass(frozen=True)
class SubmitTurn:
    """Generate the reply to ``messages``; the engine reuses what the cache holds, so an
    edit (other messages) or a regenerate (the same ones) is a submit too."""

    conversation_id: ConversationId
    turn_id: TurnId
    messages: tuple[ChatMessage, ...]
    system: str = ""
    sampling: SamplingParams = field(default_factory=SamplingParams)
    reasoning: ReasoningOptions = field(default_factory=ReasoningOptions)
    reply_id: int | None = None  # a storage message: saved as it streams (partial)
    tools: ToolRequest | None = None  # the functions the reply may call


@dataclass(frozen=True)
class Answer:
    """A chat turn the session records: the user's message ``user_text`` under
    ``parent_id`` (None: answer ``parent_id`` again, a regenerate or a retry), the reply
    begun under it, generated from the stored thread and finished with its
    :class:`~app.session.recorder.ReplyMeta` (or dropped when it failed empty). ``reply``
    holds the ids once they are written, before the turn starts."""

    conversation_id: ConversationId
    turn_id: TurnId
    parent_id: int | None
    user_text: str | None
    system: str
    sampling: SamplingParams
    reasoning: ReasoningOptions
    submitted_at: float  # perf_counter() of the client's send (the reply's time to first token)
    reply: Future[RecordedTurn]
    tools: ToolRequest | None = None  # the functions the reply may call
    # Results of the calls the reply ``parent_id`` made ("tool" messages), recorded under
    # it before the next reply (``user_text`` is None then).
    tool_results: tuple[ChatMessage, ...] = ()
    tool_outcomes: tuple[tuple[str, str], ...] = ()  # (call id, outcome) stored with a result
    # Text completion (a base model): the stored thread is one document, the prompt as it
    # stands (no template), and the reply continues it (app.messages.document).
    raw: bool = False


@dataclass(frozen=True)
class SubmitText:
    """Generate after plain text, not chat messages (``llamadesk run --raw``): the text is
    the whole prompt (BOS per the model, special tokens parsed), or with ``append`` it
    follows what the conversation's cache holds (a restored state file goes on)."""

    conversation_id: ConversationId
    turn_id: TurnId
    text: str
    append: bool = False
    sampling: SamplingParams = field(default_factory=SamplingParams)
    reply_id: int | None = None


@dataclass(frozen=True)
class SubmitTokens:
    """Generate after a prompt given as token ids (the API server's ``/v1/completions``)."""

    conversation_id: ConversationId
    turn_id: TurnId
    tokens: tuple[int, ...]
    sampling: SamplingParams = field(default_factory=SamplingParams)
    reply_id: int | None = None


@dataclass(frozen=True)
class EngineCall:
    """Run ``fn(engine)`` on the session thread between steps (tokenize, detokenize, render
    a template, embeddings); its result or exception comes back in ``reply``."""

    fn: Callable[[Engine], Any]
    reply: Future[Any]


@dataclass(frozen=True)
class Regenerate:
    """Run the conversation's last turn again (a new reply to the same messages)."""

    conversation_id: ConversationId
    turn_id: TurnId
    sampling: SamplingParams | None = None  # None: the last turn's
    reply_id: int | None = None


@dataclass(frozen=True)
class ForkConversation:
    """Open ``target`` holding ``source``'s cache up to the end of ``messages``."""

    source: ConversationId
    target: ConversationId
    messages: tuple[ChatMessage, ...]
    system: str = ""
    policy: ContextFullPolicy | None = None


@dataclass(frozen=True)
class SetPolicy:
    conversation_id: ConversationId
    policy: ContextFullPolicy | None  # None: follow the default


@dataclass(frozen=True)
class SetDefaultPolicy:
    policy: ContextFullPolicy


@dataclass(frozen=True)
class Reconfigure:
    """New context settings; a rebuild keeps every conversation."""

    settings: ContextSettings


@dataclass(frozen=True)
class SaveAll:
    """Write every open conversation's state file (they stay open)."""


@dataclass(frozen=True)
class SaveStateFile:
    """Write the conversation's cache to ``path`` (not the state store); the reply is the
    file's size, or the error."""

    conversation_id: ConversationId
    path: str
    reply: Future[int]


@dataclass(frozen=True)
class RestoreStateFile:
    """Load the state file at ``path`` into the conversation (opened if need be); the reply
    is the :class:`~app.session.events.CacheRestored` also sent to its subscribers."""

    conversation_id: ConversationId
    path: str
    reply: Future[CacheRestored]


@dataclass(frozen=True)
class Inspect:
    conversation_id: ConversationId
    reply: Future[ConversationSnapshot]


@dataclass(frozen=True)
class DeleteMessage:
    """Delete one stored message of the conversation (its replies move up to its parent);
    refused while the conversation answers. The reply is set when it is done."""

    conversation_id: ConversationId
    message_id: int
    reply: Future[None]


@dataclass(frozen=True)
class TellStored:
    """Tell the session's subscribers that a conversation was stored by another client
    (:class:`~app.session.events.ConversationStored`)."""

    conversation_id: ConversationId
    created: bool


@dataclass(frozen=True)
class Shutdown:
    pass


Command = (
    LoadModel
    | UnloadModel
    | OpenConversation
    | CloseConversation
    | SubmitTurn
    | Answer
    | SubmitText
    | SubmitTokens
    | EngineCall
    | Regenerate
    | ForkConversation
    | SetPolicy
    | SetDefaultPolicy
    | Reconfigure
    | SaveAll
    | SaveStateFile
    | RestoreStateFile
    | Inspect
    | DeleteMessage
    | TellStored
    | Shutdown
)
