"""Settings of one model that are not context parameters: its chat template.

Kept apart from :mod:`.context_fields` (every one of those is a llama.cpp context field
the settings panel edits); the engine's ``ModelSettings`` declares these.
"""

from __future__ import annotations

from app.settings_schema.field_spec import Apply, CliOption, FieldSpec


def _model_fields() -> tuple[FieldSpec, ...]:
    return (
        FieldSpec(
            "chat_template",
            "Chat template",
            "How a conversation is written for this model. Empty: the model file's own "
            "template, or, when it has none, the built-in one its vocabulary or "
            "architecture calls for. A name picks a bundled template (chatml, gemma, "
            "llama3, llama2, mistral-v3, mistral-v7, phi3, zephyr, command-r); a path "
            "reads a Jinja file.",
            "text",
            default="",
            apply=Apply.NEXT_REPLY,
            cli=CliOption(
                ("--chat-template",),
                "NAME|FILE",
                default="",
                note="Default: the model's own, else one chosen by its vocabulary.",
            ),
        ),
    )


MODEL_FIELDS: dict[str, FieldSpec] = {s.name: s for s in _model_fields()}
