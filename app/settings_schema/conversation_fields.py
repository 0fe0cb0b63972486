"""Settings of one conversation kept with its sampling values (not engine parameters:
``SamplingParams`` ignores them)."""

from __future__ import annotations

from app.context_policy import ContextFullPolicy
from app.settings_schema.field_spec import Apply, FieldSpec


def _conversation_fields() -> tuple[FieldSpec, ...]:
    return (
        FieldSpec(
            # The key the conversation's settings store it under (app.session.types
            # POLICY_KEY); the values are ContextFullPolicy's (the stored plain words).
            "context_full_policy",
            "When the context is full",
            "What happens when this conversation fills the model's context. Applies to "
            "this conversation only.",
            "choice",
            default=ContextFullPolicy.SHIFT.value,
            choices=(
                (ContextFullPolicy.SHIFT.value, "Drop the oldest messages"),
                (ContextFullPolicy.STOP.value, "Stop the reply"),
            ),
            choice_help=(
                (
                    ContextFullPolicy.SHIFT.value,
                    "The oldest messages (never the system prompt) are dropped from what "
                    "the model sees and the reply goes on; they stay in the chat.",
                ),
                (
                    ContextFullPolicy.STOP.value,
                    "The reply ends where the context is full; nothing is dropped. Start a "
                    "new chat or raise the context size to go on.",
                ),
            ),
            apply=Apply.LIVE,
        ),
    )


CONVERSATION_FIELDS: dict[str, FieldSpec] = {s.name: s for s in _conversation_fields()}
