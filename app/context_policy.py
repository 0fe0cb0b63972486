"""What a full context does to a sequence: the one spelling of "shift" and "stop".

The engine's sequences, the session, the server, the settings schema and storage all name
these two policies; they take this enum (a ``str`` enum, so stored JSON and settings files
keep the plain words). It sits at the top of ``app``, not in the engine, because the
settings schema (which storage imports) spells the conversation field with it, and storage
may not import the engine; the engine re-exports it (:mod:`app.engine.context_policy`).
"""

from __future__ import annotations

import enum


class ContextFullPolicy(enum.StrEnum):
    """What a full context does to a conversation."""

    SHIFT = "shift"  # drop the oldest messages (keep the system prompt) and go on
    STOP = "stop"  # end the reply

    @classmethod
    def parse(cls, value: object) -> ContextFullPolicy | None:
        """The policy ``value`` names, or None (not a policy)."""
        if isinstance(value, cls):
            return value
        try:
            return cls(str(value))
        except ValueError:
            return None
