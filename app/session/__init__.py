"""Qt-free application logic over the engine: conversations, turns, state files, policies.

:class:`Session` owns an engine (:class:`ConversationEngine`: llama.cpp in this process by
default, :mod:`app.session.local_engine`) on the session thread; the window, the command
line and the API server are its clients. Commands (:mod:`app.session.commands`) and events
(:mod:`app.session.events`) are frozen dataclasses and enums. Every message of every client
is written by one :class:`Recorder`, with a reply's :class:`ReplyMeta`.
"""

from app.session import commands, events
from app.session.engine_port import Capability, ConversationEngine, EngineLoader
from app.session.recorder import Recorder, ReplyMeta
from app.session.session import ConversationCallback, NoModelError, Session, SessionCallback
from app.session.types import (
    ChatMessage,
    ContextFullPolicy,
    ConversationId,
    ConversationSnapshot,
    FinishReason,
    LoadedModel,
    MessageToolCall,
    RecordedTurn,
    RestoreOutcome,
    TurnId,
    TurnResult,
    policy_of,
    reasoning_options,
)

__all__ = [
    "Capability",
    "ChatMessage",
    "ContextFullPolicy",
    "ConversationCallback",
    "ConversationEngine",
    "ConversationId",
    "ConversationSnapshot",
    "EngineLoader",
    "FinishReason",
    "LoadedModel",
    "MessageToolCall",
    "NoModelError",
    "RecordedTurn",
    "Recorder",
    "ReplyMeta",
    "RestoreOutcome",
    "Session",
    "SessionCallback",
    "TurnId",
    "TurnResult",
    "commands",
    "events",
    "policy_of",
    "reasoning_options",
]
