"""What a chat tab needs from the window (:class:`TabHost`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from app.engine.chat_template import ReasoningDefaults
    from app.session import LoadedModel, Session
    from app.ui.worker import EngineWorker


class TabHost(Protocol):
    """What a tab needs from the window."""

    worker: EngineWorker  # this tab's event stream: worker.stream(conversation id)
    session: Session  # commands

    def model_ready(self) -> bool: ...

    def text_completion(self) -> bool:
        """Whether chats with the loaded model are text completion (app.ui.text_completion)."""
        ...

    def model_path(self) -> str | None: ...

    def loaded_model(self) -> LoadedModel | None:
        """What is loaded and how (its context, template, batching); None: nothing."""
        ...

    def generating_count(self) -> int:
        """How many tabs are writing a reply now."""
        ...

    def show_message(self, text: str, error: bool = True) -> None: ...

    def fork_tab(self, conversation_id: int, message_id: int) -> None:
        """A new tab with a fork of the conversation's tab, from ``message_id`` on."""
        ...

    def conversation_changed(self, conversation_id: int) -> None: ...

    def tab_state_changed(self, conversation_id: int) -> None:
        """The conversation's tab started or stopped generating."""
        ...

    def context_policy(self) -> str: ...

    def trained_context(self) -> int:
        """The loaded model's training context (0: no model or unknown)."""
        ...

    def reasoning_support(self) -> tuple[bool, bool]:
        """Whether the loaded model's template uses (the thinking toggle, the effort)."""
        ...

    def reasoning_defaults(self) -> ReasoningDefaults | None:
        """How the loaded model's template reasons by default (None: no model, unknown)."""
        ...
