"""What a new (empty) chat shows: the model, whether it is a chat or a base model, the
context each chat gets and the chat template in use with the reason (:func:`intro_text`);
and why tabs slow when they write together (:func:`sharing_text`)."""

from __future__ import annotations

from pathlib import Path

from app.engine.chat_template import TemplateSource
from app.session import LoadedModel
from app.ui.wording import plural

NO_MODEL_TEXT = (
    "No model is loaded yet. Choose one with “Load a model” above (the library, a GGUF "
    "file, or Models ▸ Discover… to download one), then come back here."
)
_MODE_TEXTS = {"batched": "in one batched step", "turns": "in turn, one token each"}
START_TEXT = "Say hello: type a message below and press Enter."


def intro_text(model: LoadedModel | None) -> str:
    """The empty chat's text (plain, several lines)."""
    if model is None:
        return NO_MODEL_TEXT
    lines = [Path(model.path).name]
    choice = model.chat_template
    if choice is not None:
        kind = (
            "A chat model (its file has a chat template)"
            if choice.source is TemplateSource.GGUF
            else "A base model: its file has no chat template"
            if choice.source is not TemplateSource.USER_FILE
            and choice.source is not TemplateSource.USER_CHOICE
            else "Its chat template is your choice"
        )
        lines.append(kind)
    lines.append(f"{plural(model.n_ctx_seq, 'token')} of context for this chat")
    if choice is not None:
        lines.append(f"Template: {choice.name}. {choice.reason}")
    lines.append("")
    lines.append(START_TEXT)
    return "\n".join(lines)


def sharing_text(n_tabs: int, n_threads: int) -> str:
    """Why a tab writes slower while others write too (empty for one tab)."""
    if n_tabs <= 1:
        return ""
    return f"{n_tabs} tabs share {plural(n_threads, 'CPU thread')}"


def sharing_tip(model: LoadedModel | None) -> str:
    """How the tabs share a step: one batched decode or in turn, and the measurement."""
    if model is None or model.batching is None:
        return ""
    how = _MODE_TEXTS.get(model.batching.mode.value, model.batching.mode.value)
    return f"Tabs writing together are decoded {how}. {model.batching.reason}"
