"""What a new (empty) chat shows: the model, whether it is a chat or a base model, the
context each chat gets and the chat template in use with the reason (:func:`intro_text`),
and a few starters to click (:class:`Starters`: they fill the composer, nothing is sent);
and why tabs slow when they write together (:func:`sharing_text`)."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QHBoxLayout, QLabel, QPushButton, QWidget

from app.engine.chat_template import TemplateChoice, TemplateSource
from app.engine.chat_template.choice import family_of
from app.session import LoadedModel
from app.ui.model_names import model_file_name
from app.ui.wording import plural

NO_MODEL_TEXT = (
    "No model is loaded yet. Choose one with “Load a model” above (the library, a GGUF "
    "file, or Models ▸ Discover… to download one), then come back here."
)
_MODE_TEXTS = {"batched": "in one batched step", "turns": "in turn, one token each"}
START_TEXT = "Say hello: type a message below and press Enter."
BASE_TEXT = (
    "A base model continues text rather than answering: write the beginning of a text, "
    "and it writes on."
)
# Short and generic (any chat model can take them); each ends where the user goes on
# typing: a starter fills the composer and is not sent.
CHAT_STARTERS = (
    ("Explain simply", "Explain in simple terms how "),
    ("Summarize", "Summarize the following text in three sentences:\n\n"),
    ("Write an email", "Write a short, friendly email to "),
    ("Ideas", "Give me five ideas for "),
)
BASE_STARTERS = (("Continue this text", "Once upon a time, in a small village by the sea,"),)


def is_base_model(model: LoadedModel) -> bool:
    """The file has no chat template and none was chosen by the user (a template the
    family expects may be in use, but the model was not trained to answer)."""
    return model.chat_template is not None and is_base_choice(model.chat_template)


def template_label(choice: TemplateChoice) -> str:
    """The template's name; a model file's own ("gguf") with the family it writes."""
    family = family_of(choice.template) if choice.source is TemplateSource.GGUF else None
    return f"{choice.name}, {family} style" if family else choice.name


def is_base_choice(choice: TemplateChoice) -> bool:
    """The template was chosen for a file without one, not by the user."""
    return choice.source not in (
        TemplateSource.GGUF,
        TemplateSource.USER_FILE,
        TemplateSource.USER_CHOICE,
    )


def intro_text(model: LoadedModel | None) -> str:
    """The empty chat's text (plain, several lines)."""
    if model is None:
        return NO_MODEL_TEXT
    lines = [model_file_name(model.path)]
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
        lines.append(f"Template: {template_label(choice)}. {choice.reason}")
    lines.append("")
    lines.append(BASE_TEXT if is_base_model(model) else START_TEXT)
    return "\n".join(lines)


def starters(model: LoadedModel | None) -> tuple[tuple[str, str], ...]:
    """(button label, text it puts in the composer) for the model's empty chat."""
    if model is None:
        return ()
    return BASE_STARTERS if is_base_model(model) else CHAT_STARTERS


class Starters(QWidget):
    """A row of starter buttons under the empty chat: a click (or Space on one reached
    with Tab) puts its text in the composer, focused with the cursor at the end, for the
    user to finish and send; shown while the chat is empty and a model is loaded."""

    def __init__(self, fill: Callable[[str], None], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("starters")
        self._fill = fill
        self._shown: tuple[tuple[str, str], ...] = ()
        self._row = QHBoxLayout(self)
        self._row.setContentsMargins(8, 4, 8, 4)
        self.buttons: list[QPushButton] = []
        self.setVisible(False)

    def show_for(self, model: LoadedModel | None, empty: bool) -> None:
        wanted = starters(model) if empty else ()
        if wanted != self._shown:
            self._shown = wanted
            self._rebuild()
        self.setVisible(bool(wanted))

    def _rebuild(self) -> None:
        while (item := self._row.takeAt(0)) is not None:
            if (widget := item.widget()) is not None:
                widget.deleteLater()
        self.buttons = []
        if not self._shown:
            return
        self._row.addStretch(1)
        self._row.addWidget(QLabel("Start with:"))
        for label, text in self._shown:
            button = QPushButton(label)
            button.setObjectName("starter")
            button.setToolTip(f"Put “{text.strip()}…” in the message box (not sent)")
            button.setAccessibleName(f"Starter: {label}")
            button.setFocusPolicy(Qt.FocusPolicy.StrongFocus)
            button.setAutoDefault(False)
            button.clicked.connect(lambda _c=False, t=text: self._fill(t))
            self._row.addWidget(button)
            self.buttons.append(button)
        self._row.addStretch(1)


def sharing_text(n_tabs: int, n_threads: int) -> str:
    """Why a tab writes slower while others write too (empty for one tab)."""
    if n_tabs <= 1:
        return ""
    return f"{n_tabs} tabs share {plural(n_threads, 'CPU thread')}"


def sharing_tip(model: LoadedModel | None) -> str:
    """How the tabs share a step: one batched decode or in turn, and the measurement."""
    if model is None or model.batching is None:
        return ""
    if model.settings.n_seq_max < 2:
        # one sequence in the context: nothing is batched, the tabs take turns
        return "Tabs writing together take turns: this context holds one conversation at a time."
    how = _MODE_TEXTS.get(model.batching.mode.value, model.batching.mode.value)
    return f"Tabs writing together are decoded {how}. {model.batching.reason}"
