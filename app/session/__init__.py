"""Qt-free application logic over the engine: conversations, turns, state files, policies.

:class:`Session` owns the :class:`~app.engine.Engine` on its own thread; the window, the
command line and the API server are its clients. Commands (:mod:`app.session.commands`)
and events (:mod:`app.session.events`) are frozen dataclasses and enums.
"""

from app.session import commands, events
from app.session.session import ConversationCallback, NoModelError, Session, SessionCallback
from app.session.types import (
    ChatMessage,
    ContextFullPolicy,
    ConversationId,
    ConversationSnapshot,
    FinishReason,
    LoadedModel,
    RestoreOutcome,
    TurnId,
    TurnResult,
    policy_of,
    reasoning_options,
)

__all__ = [
    "ChatMessage",
    "ContextFullPolicy",
    "ConversationCallback",
    "ConversationId",
    "ConversationSnapshot",
    "FinishReason",
    "LoadedModel",
    "NoModelError",
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
