"""A chat tab's choices in its status line: what happens when the context is full, and
the "Thinking" and "Effort" of a reasoning model.

All three are the conversation's own settings, kept with its sampling settings (under
POLICY_KEY, THINKING_KEY and EFFORT_KEY: the engine's SamplingParams ignores keys it does
not know); the reasoning choices go to the engine with each turn and show only when the
model's template uses them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtWidgets import QCheckBox, QComboBox

from app.session import ContextFullPolicy, policy_of
from app.session.types import DEFAULT_EFFORT, EFFORT_KEY, POLICY_KEY, THINKING_KEY
from app.settings_schema import CONVERSATION_FIELDS
from app.ui.field_editors import SpecComboBox, make_editor

if TYPE_CHECKING:
    from app.ui.tab_protocols import ChoicesTab


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
        self.thinking.setToolTip(
            "Let the model think before it answers (its thoughts show above the answer). "
            "Applies to this conversation only."
        )
        self.thinking.toggled.connect(self._on_thinking)
        self.effort = QComboBox()
        self.effort.setObjectName("reasoning-effort")
        for value in ("low", "medium", "high"):
            self.effort.addItem(f"Effort: {value}", value)
        self.effort.setToolTip(
            "How hard the model thinks before answering. Applies to this conversation only."
        )
        self.effort.activated.connect(self._on_effort)

    def tab_policy(self) -> ContextFullPolicy | None:
        """This tab's own context-full policy (None: it follows the default)."""
        return policy_of(self.tab.conversation.sampling)

    def effective_policy(self) -> str:
        return str(self.tab_policy() or self.tab.host.context_policy())

    def init_policy(self) -> None:
        # the window opens the conversation in the session with tab_policy()
        index = self.policy.findData(self.effective_policy())
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

    def thinking_enabled(self) -> bool:
        """This conversation's "Thinking" choice (default on, as llama.cpp's server)."""
        return self.tab.conversation.sampling.get(THINKING_KEY, True) is not False

    def reasoning_effort(self) -> str:
        effort = self.tab.conversation.sampling.get(EFFORT_KEY)
        return effort if effort in ("low", "medium", "high") else DEFAULT_EFFORT.value

    def init_reasoning(self) -> None:
        self.thinking.blockSignals(True)
        self.thinking.setChecked(self.thinking_enabled())
        self.thinking.blockSignals(False)
        index = self.effort.findData(self.reasoning_effort())
        if index >= 0:
            self.effort.setCurrentIndex(index)
        self.set_reasoning_support(*self.tab.host.reasoning_support())

    def set_reasoning_support(self, thinking_toggle: bool, effort: bool) -> None:
        """Show the reasoning controls the loaded model's template uses (hide the others)."""
        self.thinking.setVisible(thinking_toggle)
        self.effort.setVisible(effort)
        self.effort.setEnabled(not thinking_toggle or self.thinking.isChecked())

    def _on_thinking(self, enabled: bool) -> None:
        self.effort.setEnabled(enabled or self.thinking.isHidden())
        if enabled == self.thinking_enabled():
            return
        self.tab.settings.set_extra(THINKING_KEY, enabled)
        self.tab.save_settings()

    def _on_effort(self, index: int) -> None:
        effort = str(self.effort.itemData(index))
        if effort == self.reasoning_effort() and EFFORT_KEY in self.tab.conversation.sampling:
            return
        self.tab.settings.set_extra(EFFORT_KEY, effort)
        self.tab.save_settings()
