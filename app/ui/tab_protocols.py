"""What a chat tab's helpers need from the tab: each helper is given the tab as the narrow
protocol here (:class:`TurnTab` for :mod:`app.ui.tab_turn`, :class:`ChoicesTab` for
:mod:`app.ui.tab_choices`, :class:`HintTab` for :mod:`app.ui.tab_token_hint`), so that the
tab imports its helpers and no helper imports the tab.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from app.session import TurnResult
    from app.storage import Conversation, Message
    from app.ui.chat_view import ChatView
    from app.ui.composer import Composer, ConversationSettings
    from app.ui.message_bar import MessageBar
    from app.ui.tab_host import TabHost
    from app.ui.tab_reply import ReplyBuffer
    from app.ui.tab_status import StatusEvent, TabFigures, TabState
    from app.ui.tool_turns import TabToolTurns


class ChoicesTab(Protocol):
    """What the status line's choices ("When full", "Thinking", "Effort") use of the tab."""

    host: TabHost
    cid: int
    conversation: Conversation  # its sampling settings hold the choices
    settings: ConversationSettings  # where a choice is written before it is saved

    def save_settings(self) -> None: ...


class HintTab(Protocol):
    """What the token count under the composer uses of the tab."""

    host: TabHost
    composer: Composer
    info: TabFigures  # the session's figures (context size, room kept for the reply)


class TurnTab(Protocol):
    """What a turn (generation and the conversation's session events) uses of the tab."""

    host: TabHost
    cid: int
    conversation: Conversation
    branch: list[Message]  # the messages shown, the reply being written last
    view: ChatView
    composer: Composer  # a refused turn's text goes back into it
    notice: MessageBar
    reply: ReplyBuffer
    reply_id: int | None
    info: TabFigures
    state: TabState
    prompt_progress: tuple[int, int]  # the prompt's tokens processed, and in all
    turns_since_open: int
    last_completion: TurnResult | None
    tool_turns: TabToolTurns  # the chat's MCP tools and their rounds
    document_mode: bool  # text completion: the branch shown as one document

    @property
    def generating(self) -> bool: ...

    def set_generating(self, generating: bool) -> None: ...

    def save_settings(self) -> None: ...

    def notify(
        self,
        text: str,
        error: bool = True,
        action: tuple[str, Callable[[], None]] | None = None,
        model_bound: bool = False,
    ) -> None: ...

    def show_branch(self) -> None: ...

    def load_thread(self, leaf_id: int | None = None) -> None: ...

    def reload_conversation(self) -> None: ...

    def on_status(self, event: StatusEvent) -> None: ...

    def update_status(self) -> None: ...
