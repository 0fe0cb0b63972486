"""A chat tab's choices in its status line: what happens when the context is full, and
the "Thinking" and "Effort" of a reasoning model.

All three are the conversation's own settings, kept with its sampling settings (under
POLICY_KEY, THINKING_KEY and EFFORT_KEY: the engine's SamplingParams ignores keys it does
not know); the reasoning choices go to the engine with each turn and show only when the
model's template uses them. A conversation that stored no "Thinking" choice follows the
model's default (the engine's rule, :class:`~app.engine.chat_template.ReasoningDefaults`):
the toggle shows that default, and its tooltip says which rule and format decided it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtWidgets import QCheckBox, QComboBox

from app.engine.reasoning import ReasoningFormat
from app.session import ContextFullPolicy, policy_of
from app.session.types import DEFAULT_EFFORT, EFFORT_KEY, POLICY_KEY, THINKING_KEY
from app.settings_schema import CONVERSATION_FIELDS
from app.ui.field_editors import SpecComboBox, make_editor

if TYPE_CHECKING:
    from app.engine.chat_template import ReasoningDefaults
    from app.ui.tab_protocols import ChoicesTab

EFFORT_TIP = "How hard the model thinks before answering. Applies to this conversation only."
THINKING_TIP = (
    "Let the model think before it answers (its thoughts show above the answer). "
    "Applies to this conversation only."
)
# How the tooltip names a reasoning format (the others by their name).
_FORMAT_NAMES = {
    ReasoningFormat.THINK_TAGS: "<think>",
    ReasoningFormat.THINK_BRACKETS: "[THINK]",
    ReasoningFormat.HARMONY: "gpt-oss channel",
}


def format_name(fmt: ReasoningFormat) -> str:
    return _FORMAT_NAMES.get(fmt, fmt.value.replace("_", " "))


def default_thinking_tip(defaults: ReasoningDefaults | None) -> str:
    """The toggle's tooltip: what it does, and the model's default with why."""
    if defaults is None:
        return THINKING_TIP
    state = "on" if defaults.thinking_by_default else "off"
    if defaults.format is ReasoningFormat.NONE:
        why = f"{defaults.rule} rule: its template shows no reasoning format"
    else:
        why = f"its template's {format_name(defaults.format)} format, {defaults.rule} rule"
    return f"{THINKING_TIP}\nThinking is {state} by default for this model ({why})."


class TabChoices:
    """``tab``'s "When full" (``policy``), "Thinking" (``thinking``), "Effort" (``effort``)."""

    def __init__(self, tab: ChoicesTab) -> None:
        self.tab = tab
        # "When full" is a conversation setting (its labels and help from the schema).
        self.policy_spec = CONVERSATION_FIELDS[POLICY_KEY]
        policy = make_editor(self.policy_spec)
        assert isinstance(policy, SpecComboBox)
        self.policy = policy
        self.policy.setObjectName("context-policy")
        self.policy.activated.connect(self._on_policy)
        self.thinking = QCheckBox("Thinking")
        self.thinking.setObjectName("thinking-toggle")
        self.thinking.setToolTip(THINKING_TIP)
        self.thinking.toggled.connect(self._on_thinking)
        self.effort = QComboBox()
        self.effort.setObjectName("reasoning-effort")
        for value in ("low", "medium", "high"):
            self.effort.addItem(f"Effort: {value}", value)
        self.effort.setToolTip(EFFORT_TIP)
        self.effort.activated.connect(self._on_effort)

    def tab_policy(self) -> ContextFullPolicy | None:
        """This tab's own context-full policy (None: it follows the default)."""
        return policy_of(self.tab.conversation.sampling)

    def effective_policy(self) -> ContextFullPolicy:
        """This tab's policy, else the window's default (the app settings' word)."""
        own = self.tab_policy()
        if own is not None:
            return own
        return ContextFullPolicy.parse(self.tab.host.context_policy()) or ContextFullPolicy.SHIFT

    def init_policy(self) -> None:
        # the window opens the conversation in the session with tab_policy()
        index = self.policy.findData(self.effective_policy().value)
        if index >= 0:
            self.policy.setCurrentIndex(index)

    def _on_policy(self, index: int) -> None:
        policy = ContextFullPolicy.parse(self.policy.itemData(index))
        if policy is None or policy == self.tab_policy():
            return
        tab = self.tab
        tab.settings.set_extra(POLICY_KEY, policy.value)
        tab.save_settings()
        tab.host.session.set_policy(tab.cid, policy)

    def thinking_choice(self) -> bool | None:
        """This conversation's own "Thinking" choice (None: the model's default)."""
        stored = self.tab.conversation.sampling.get(THINKING_KEY)
        return stored if isinstance(stored, bool) else None

    def thinking_enabled(self) -> bool:
        """Whether this conversation's turns think: its choice, else the model's default
        (unknown without a model: on, as the toggle is hidden then)."""
        choice = self.thinking_choice()
        if choice is not None:
            return choice
        defaults = self.tab.host.reasoning_defaults()
        return defaults.thinking_by_default if defaults is not None else True

    def reasoning_effort(self) -> str:
        effort = self.tab.conversation.sampling.get(EFFORT_KEY)
        return effort if effort in ("low", "medium", "high") else DEFAULT_EFFORT.value

    def init_reasoning(self) -> None:
        index = self.effort.findData(self.reasoning_effort())
        if index >= 0:
            self.effort.setCurrentIndex(index)
        self.set_reasoning_support(*self.tab.host.reasoning_support())

    def set_reasoning_support(self, thinking_toggle: bool, effort: bool) -> None:
        """Show the reasoning controls the loaded model's template uses (hide the others);
        the toggle shows this conversation's choice, else the model's default."""
        self.thinking.blockSignals(True)
        self.thinking.setChecked(self.thinking_enabled())
        self.thinking.blockSignals(False)
        self.thinking.setToolTip(default_thinking_tip(self.tab.host.reasoning_defaults()))
        if EFFORT_KEY in self.tab.conversation.sampling:
            self.effort.setToolTip(EFFORT_TIP)
        else:  # nothing chosen: the turn leaves the effort to the template
            self.effort.setToolTip(f"{EFFORT_TIP}\nNot chosen yet: the template's own default.")
        self.thinking.setVisible(thinking_toggle)
        self.effort.setVisible(effort)
        self.effort.setEnabled(not thinking_toggle or self.thinking.isChecked())

    def _on_thinking(self, enabled: bool) -> None:
        self.effort.setEnabled(enabled or self.thinking.isHidden())
        if enabled == self.thinking_enabled() and self.thinking_choice() is not None:
            return
        self.tab.settings.set_extra(THINKING_KEY, enabled)
        self.tab.save_settings()

    def _on_effort(self, index: int) -> None:
        effort = str(self.effort.itemData(index))
        if effort == self.reasoning_effort() and EFFORT_KEY in self.tab.conversation.sampling:
            return
        self.tab.settings.set_extra(EFFORT_KEY, effort)
        self.tab.save_settings()
        self.effort.setToolTip(EFFORT_TIP)
