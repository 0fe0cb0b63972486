"""Text completion in the window, for base models (issue 28, item 6).

A base model continues text rather than answering. In text completion the chat is one
document: what the user wrote and what the model wrote, joined as they stand (no
template, no bubbles); Send adds the composer's text to the document (nothing typed: the
model just writes on) and the continuation is appended in place. The messages are stored
as a chat's (user text, then the reply under it), so Try again, versions, fork and delete
work as they do in a chat; the session makes the prompt (``Session.answer(raw=True)``).

The mode is the model file's template choice: :data:`RAW_TEMPLATE` ("Raw: text
completion" in the template picker), or automatic for a base model (one whose file has no
chat template, :func:`~app.ui.tab_intro.is_base_model`); choosing a template chats.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from PySide6.QtWidgets import QPushButton

from app.messages import document
from app.session import LoadedModel
from app.storage import Message
from app.ui.chat_messages import shown_message
from app.ui.composer import Composer
from app.ui.message_data import MessageData
from app.ui.tab_intro import is_base_model

# The template picker's value for text completion: no bundled template is named so and
# no file path starts so; the engine is never given it (it keeps its automatic template).
RAW_TEMPLATE = ":raw"
RAW_TEXT = "Raw: text completion (no template)"
DOCUMENT_ROLE = "document"  # the one message widget that shows the whole document

CONTINUE_TEXT = "Continue"
CONTINUE_TIP = (
    "Text completion: the text in the box is added to the document, then the model writes "
    "on from its end (with the box empty it just writes on)"
)
PLACEHOLDER = "Add to the text, or leave this empty: Enter lets the model write on"


def show_mode(document_mode: bool, send: QPushButton, composer: Composer) -> None:
    """Chat or text completion: the Send button and the composer's placeholder say which."""
    send.setText(CONTINUE_TEXT if document_mode else "Send")
    send.setToolTip(CONTINUE_TIP if document_mode else "")
    composer.placeholder = PLACEHOLDER if document_mode else ""
    composer.set_enter_sends(composer.enter_sends)


def completion_mode(model: LoadedModel | None, template_value: str) -> bool:
    """Whether chats with ``model`` are text completion: raw chosen for its file, or
    automatic for a base model."""
    if model is None:
        return False
    if template_value == RAW_TEMPLATE:
        return True
    return not template_value and is_base_model(model)


def engine_template(value: str) -> str:
    """The template value the engine gets for a stored choice (raw: its automatic one)."""
    return "" if value == RAW_TEMPLATE else value


def document_data(
    branch: list[Message], places: Mapping[int, tuple[int, int]]
) -> list[MessageData]:
    """The branch as the document's one widget (nothing for an empty branch): its text
    the whole document, its figures and versions the last part's (Try again writes
    that part again; ``places`` holds its place among its siblings, read by the
    session's library)."""
    if not branch:
        return []
    last = shown_message(branch[-1], *places.get(branch[-1].id, (1, 1)))
    return [dataclasses.replace(last, role=DOCUMENT_ROLE, content=document(branch))]


def shown_data(
    branch: list[Message], places: Mapping[int, tuple[int, int]], document_mode: bool
) -> list[MessageData]:
    """``branch`` as the view shows it: one widget per message, each ``places[id]`` among
    its siblings, or in text completion the one document (:func:`document_data`)."""
    if document_mode:
        return document_data(branch, places)
    return [shown_message(m, *places.get(m.id, (1, 1))) for m in branch]
