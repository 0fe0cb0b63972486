"""The context-full policies at the engine's edge: :class:`ContextFullPolicy` (defined in
:mod:`app.context_policy`, below the engine and the settings schema, which storage reads:
one spelling for all of them), re-exported where the engine's callers import it."""

from __future__ import annotations

from app.context_policy import ContextFullPolicy as ContextFullPolicy

__all__ = ["ContextFullPolicy"]
