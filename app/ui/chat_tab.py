"""One chat tab: a conversation bound to one engine sequence.

The tab keeps the branch it shows (storage messages), subscribes to its conversation's
session events (``worker.stream(cid)``), streams the reply into the last message widget
(rendered by the window's flush timer, never per token) and shows the stored reply when
the turn ends: the session records the user's message and the reply (``Session.answer``),
the tab writes no message. A reasoning model's reply comes in two parts, its reasoning
(``TabTurn.on_reasoning``) then its answer (``TabTurn.on_tokens``); both are shown apart
(and stored apart by the session). The conversation's "Thinking" and "Effort" choices
(shown only when the model's template uses them; without a choice, the model's default)
are kept with its sampling settings and go to the engine with each turn.

Its parts, each in its own module: what it needs from the window (:mod:`app.ui.tab_host`),
the storage <-> session conversions (:mod:`app.ui.chat_messages`), the status line's texts
(:mod:`app.ui.tab_status`), the "When full", "Thinking" and "Effort" choices
(:mod:`app.ui.tab_choices`), the token count before sending (:mod:`app.ui.tab_token_hint`),
the streaming reply's buffers (:mod:`app.ui.tab_reply`) and the turns with the
session's events (:mod:`app.ui.tab_turn`). Each helper is given the tab as the narrow
protocol of :mod:`app.ui.tab_protocols` it needs: the tab imports its helpers, never the
other way round.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from PySide6.QtCore import Qt, QTimer, Signal, Slot
from PySide6.QtGui import QGuiApplication, QTextCursor
from PySide6.QtWidgets import (
    QApplication,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QSizePolicy,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.errors import LlamaDeskError
from app.session import ContextFullPolicy, TurnResult
from app.session import events as ev
from app.storage import Conversation, Message
from app.ui.chat_messages import chat_messages, engine_messages
from app.ui.chat_view import ChatView
from app.ui.composer import Composer, ConversationSettings
from app.ui.context_meter import ContextMeter
from app.ui.door import library, places, settle
from app.ui.message_bar import MessageBar
from app.ui.message_delete import ask_delete, offer_after_delete
from app.ui.status_text import ElidedLabel, IsolatedLabel
from app.ui.tab_choices import TabChoices
from app.ui.tab_host import TabHost
from app.ui.tab_intro import Starters, intro_text, sharing_text, sharing_tip
from app.ui.tab_notes import note_event
from app.ui.tab_reply import QUIET_S, ReplyBuffer
from app.ui.tab_status import (
    MeterFigures,
    StatusEvent,
    TabFigures,
    TabState,
    state_text,
    state_tip,
    tokens_text,
)
from app.ui.tab_stop_strings import StopStrings
from app.ui.tab_token_hint import TOKEN_COUNT_DELAY_MS, TOKEN_HINT_MIN_CHARS, TokenHint
from app.ui.tab_turn import TabTurn
from app.ui.text_completion import show_mode, shown_data
from app.ui.token_estimate import chat_token_estimate
from app.ui.tool_picker import attach as attach_tools
from app.ui.tool_turns import TabToolTurns

# What other modules import from here (the names before the split into modules).
__all__ = [
    "TOKEN_COUNT_DELAY_MS",
    "TOKEN_HINT_MIN_CHARS",
    "ChatTab",
    "TabHost",
    "chat_messages",
    "engine_messages",
]

STATUS_INTERVAL_S = 0.25  # a streaming tab's speed and meter are refreshed this often


class ChatTab(QWidget):
    """See the module docstring."""

    titleChanged = Signal()

    def __init__(
        self, host: TabHost, conversation: Conversation, leaf_id: int | None = None
    ) -> None:
        super().__init__()
        self.host = host
        self.conversation = conversation
        self.cid = conversation.id
        self.branch: list[Message] = []
        self.generating = False
        self.reply_id: int | None = None
        self.reply = ReplyBuffer()  # the reply being streamed: its text and figures
        self._editing: int | None = None
        self.state = TabState.IDLE
        self.prompt_progress = (0, 0)  # the prompt's tokens processed, and in all
        self.info = TabFigures()  # what the session's events said of the conversation
        self.turns_since_open = 0
        self._compact = False
        self._context_start: int | None = None
        self._status_at = 0.0  # when a streaming tab's status line was last refreshed
        self.last_completion: TurnResult | None = None
        self.document_mode = False  # text completion (app.ui.text_completion)
        self.server_failed = False  # the remote engine failed the last reply
        self.count_stale = False  # a message was deleted: the count comes with the next turn
        self.turn = TabTurn(self)
        self._stream = host.worker.stream(self.cid)
        self._stream.received.connect(self.on_event)

        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(0)

        self.view = ChatView(self)
        self.view.action.connect(self._on_action)
        layout.addWidget(self.view, 1)

        # Notices about this conversation stay in its tab (a background tab's error is
        # seen when the tab is, and nothing above the tab bar moves).
        self.notice = MessageBar(self)
        self.notice.setObjectName("tab-notice")
        self._notice_model_bound = False  # the notice speaks of the loaded model (notify)
        layout.addWidget(self.notice)

        # status line: context meter, state, what happens when full, settings toggle
        status = QHBoxLayout()
        status.setContentsMargins(8, 2, 8, 2)
        self.meter = ContextMeter()
        self.meter.setObjectName("context-meter")
        self.meter_label = QLabel()
        self.meter_label.setObjectName("context-label")
        self.state_label = ElidedLabel("idle")
        self.state_label.setObjectName("state-label")
        # a long state (a restore refusal's reason) is cut, never widens the window
        self.state_label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.choices = TabChoices(self)
        self.policy = self.choices.policy
        self.thinking = self.choices.thinking
        self.effort = self.choices.effort
        self.settings_button = QToolButton()
        self.settings_button.setText("Conversation settings")
        self.settings_button.setToolTip(
            "This conversation's system prompt, sampling and what happens when the context is full"
        )
        self.settings_button.setCheckable(True)
        self.settings_button.setObjectName("conversation-settings-toggle")
        status.addWidget(self.meter)
        # the figures change while a reply streams: behind IsolatedLabel, not a tab repaint
        status.addWidget(IsolatedLabel(self.meter_label, self))
        status.addSpacing(12)
        status.addWidget(IsolatedLabel(self.state_label, self), 1)
        status.addWidget(self.thinking)
        status.addWidget(self.effort)
        status.addWidget(self.settings_button)
        layout.addLayout(status)
        self.tools = attach_tools(self, status, layout)  # MCP tools: the button, the warning
        self.tool_turns = TabToolTurns(self)  # their calls in the chat

        self.settings = ConversationSettings(self)
        self.settings.setVisible(False)
        self.settings_button.toggled.connect(self.settings.setVisible)
        self.settings.set_values(conversation.system_prompt, conversation.sampling)
        self.settings.add_row(self.choices.policy_spec.label, self.policy)
        self.stop_strings = StopStrings(self.settings, conversation.sampling)
        self.settings.add_row("Stop strings", self.stop_strings)
        self._settings_timer = QTimer(self)
        self._settings_timer.setSingleShot(True)
        self._settings_timer.setInterval(500)
        self._settings_timer.timeout.connect(self.save_settings)
        self.settings.changed.connect(self._settings_timer.start)
        layout.addWidget(self.settings)

        self.edit_banner = QLabel()
        self.edit_banner.setObjectName("edit-banner")
        self.edit_banner.setVisible(False)
        self.edit_banner.setContentsMargins(8, 2, 8, 2)
        layout.addWidget(self.edit_banner)

        # A long message's token count before it is sent (counted on the session thread).
        self.hint = TokenHint(self)
        self.token_hint = self.hint.label
        layout.addWidget(self.token_hint)

        row = QHBoxLayout()
        row.setContentsMargins(8, 4, 8, 8)
        self.composer = Composer(self)
        self.composer.sendRequested.connect(self.send)
        self.composer.stopRequested.connect(self._on_escape)
        self.composer.textChanged.connect(self.hint.text_changed)
        self.send_button = QPushButton("Send")
        self.send_button.setObjectName("send")
        self.send_button.clicked.connect(self.send)
        self.stop_button = QPushButton("Stop")
        self.stop_button.setObjectName("stop")
        self.stop_button.clicked.connect(self.stop)
        self.stop_button.setVisible(False)
        row.addWidget(self.composer, 1)
        row.addWidget(self.send_button, 0, Qt.AlignmentFlag.AlignBottom)
        row.addWidget(self.stop_button, 0, Qt.AlignmentFlag.AlignBottom)
        layout.addLayout(row)
        self.starters = Starters(self.start_with)  # under the empty chat, above its status
        layout.insertWidget(1, self.starters)

        self.choices.init_policy()
        self.choices.init_reasoning()
        self.load_thread(leaf_id)
        self.update_status()

    # ------------------------------------------------------------------ data

    @property
    def title(self) -> str:
        return self.conversation.title or "New chat"

    def reload_conversation(self) -> None:
        try:
            door = library(self.host.session)
            self.conversation = settle(door.conversation(self.cid, include_deleted=True))
        except LlamaDeskError:
            return
        self.titleChanged.emit()

    def load_thread(self, leaf_id: int | None = None) -> None:
        try:
            thread, places = settle(library(self.host.session).shown_thread(self.cid, leaf_id))
        except LlamaDeskError as exc:
            self.notify(str(exc))
            return
        self.branch = thread
        self.document_mode = self.host.text_completion()
        show_mode(self.document_mode, self.send_button, self.composer)
        self.view.set_messages(shown_data(thread, places, self.document_mode))
        self._sync_context_start()
        self.tool_turns.render()
        self.show_intro()

    def show_intro(self) -> None:
        """What an empty chat shows: the model, its kind, context and template."""
        ready = self.host.model_ready()
        model = self.host.loaded_model() if ready else None
        if self.host.text_completion() != self.document_mode and not self.generating:
            self.load_thread(self.leaf_id())  # chat <-> text completion: shown anew
            return
        self.view.set_placeholder(intro_text(model))
        self.starters.show_for(model, empty=not self.branch)

    def start_with(self, text: str) -> None:
        """A starter's text in the composer, to finish and send (nothing is sent)."""
        self.composer.setPlainText(text)
        self.composer.moveCursor(QTextCursor.MoveOperation.End)
        self.composer.setFocus(Qt.FocusReason.OtherFocusReason)

    def show_branch(self) -> None:
        """Show ``branch``, keeping the widgets of the messages already shown in front (a
        new turn adds two widgets instead of rebuilding, and querying, the whole chat)."""
        if self.document_mode:  # one widget: the whole document
            places = self._places(self.branch[-1:])
            self.view.set_messages(shown_data(self.branch, places, document_mode=True))
            self._after_branch()
            return
        shown = [w.data.id for w in self.view.messages()]
        keep = 0
        for widget_id, message in zip(shown, self.branch, strict=False):
            if widget_id != message.id:
                break
            keep += 1
        self.view.setUpdatesEnabled(False)
        try:
            self.view.keep_first(keep)
            added = self.branch[keep:]
            for data in shown_data(added, self._places(added), document_mode=False):
                self.view.append(data)
        finally:
            self.view.setUpdatesEnabled(True)
        self._after_branch()

    def _after_branch(self) -> None:
        if self.generating:  # no edit, delete... while it answers
            self.view.set_actions_enabled(False)
        self._sync_context_start()
        self.tool_turns.render()
        if self.branch:
            self.starters.setVisible(False)
        self.view.follow = True
        self.view.scroll_to_end()

    def _sync_context_start(self) -> None:
        """Mark where the messages the model still sees begin (the view keeps the mark)."""
        start = self.context_start()
        if start != self._context_start:
            self._context_start = start
            self.view.set_context_start(start)

    def _places(self, messages: list[Message]) -> dict[int, tuple[int, int]]:
        """The messages' places among their siblings, read by the session's library (an
        error is said; the messages then show as the only versions)."""
        try:
            return places(self.host.session, messages)
        except LlamaDeskError as exc:
            self.notify(str(exc))
            return {}

    def after_delete(self) -> None:
        offer_after_delete(self)

    def regenerate_under(self, message_id: int) -> None:
        """A reply to ``message_id`` (the user message a delete left without one)."""
        if not self.generating and self.host.model_ready() and self.leaf_id() == message_id:
            self.turn.generate(message_id)

    def leaf_id(self) -> int | None:
        return self.branch[-1].id if self.branch else None

    def set_generating(self, generating: bool) -> None:
        """A turn starts or ends: Send or Stop shows, the tab's title and the window follow."""
        self.generating = generating
        sent_by_button = generating and self.send_button.hasFocus()
        self.send_button.setVisible(not generating)
        self.stop_button.setVisible(generating)
        if sent_by_button:
            # the hidden Send's focus went on to Stop and typing went nowhere: the message
            # box takes it (Esc there stops the reply)
            self.composer.setFocus(Qt.FocusReason.OtherFocusReason)
        self.titleChanged.emit()
        self.host.tab_state_changed(self.cid)

    def save_settings(self) -> None:
        self._settings_timer.stop()
        system, sampling = self.settings.values()
        if system == self.conversation.system_prompt and sampling == self.conversation.sampling:
            return
        try:
            self.conversation = settle(
                library(self.host.session).update_settings(
                    self.cid, system_prompt=system, sampling=sampling
                )
            )
        except LlamaDeskError as exc:
            self.notify(str(exc))

    def notify(
        self,
        text: str,
        error: bool = True,
        action: tuple[str, Callable[[], None]] | None = None,
        model_bound: bool = False,
    ) -> None:
        """A notice in this tab (errors stay until dismissed, the rest for a while).
        ``model_bound``: it speaks of the loaded model (or of none), so it goes when
        another model loads or the model is unloaded (:meth:`model_changed`)."""
        self._notice_model_bound = model_bound
        self.notice.show_message(text, error, action, timeout_ms=0 if error else 8000)

    def model_changed(self) -> None:
        """Another model (or none) answers now: a notice about the old one no longer
        applies (a refusal that named its context size, "load a model first")."""
        if self._notice_model_bound:
            self._notice_model_bound = False
            self.notice.dismiss()

    # ------------------------------------------------------------------ user actions

    @Slot()
    def send(self) -> None:
        text = self.composer.toPlainText()
        if not self.document_mode:
            text = text.strip()  # in a document, spaces and line breaks are its text
        if not text and not (self.document_mode and self.branch):
            if self.document_mode:  # "leave this empty" needs a text to write on
                self.notify("Write the start of the text first; the model continues it.", False)
            return
        if self.generating:
            self.notify("This tab is still answering: stop it first (Esc).", False)
            return
        if not self.host.model_ready():
            self.notify(
                "Load a model first: choose one with “Load a model” above, or in Models ▸ "
                "Model manager.",
                model_bound=True,
            )
            return
        parent = self.leaf_id()
        if self._editing is not None:
            try:
                parent = settle(library(self.host.session).message(self._editing)).parent_id
            except LlamaDeskError as exc:
                self.notify(str(exc))
                return
        # The session records the message and its reply (the tab only asks, then shows).
        # The composer is cleared first: a refusal the session sends back puts it again.
        editing = self._editing
        self.composer.clear()
        self._cancel_edit()
        # text completion with the box empty: the model writes on from the document's end
        if not self.turn.generate(parent, text or None):  # nothing was asked: all stays as it was
            self.composer.setPlainText(text)
            if editing is not None:
                self._editing = editing
                self.view.set_editing(editing)
                self.edit_banner.setVisible(True)

    def regenerate(self, message_id: int) -> None:
        if self.generating or not self.host.model_ready():
            return
        try:
            message = settle(library(self.host.session).message(message_id))
        except LlamaDeskError as exc:
            self.notify(str(exc))
            return
        if message.role == "user":  # text completion: the document ends with the user's text
            self.turn.generate(message.id)
            return
        if message.parent_id is None:
            return
        self.turn.generate(message.parent_id)

    def edit(self, message_id: int) -> None:
        if self.generating:
            return
        try:
            message = settle(library(self.host.session).message(message_id))
        except LlamaDeskError as exc:
            self.notify(str(exc))
            return
        self._editing = message_id
        self.view.set_editing(message_id)
        self.composer.setPlainText(message.content)
        self.composer.setFocus()
        self.edit_banner.setText(
            "Editing a message: Enter sends the new version (the old one stays as a branch), "
            "Esc cancels."
        )
        self.edit_banner.setVisible(True)

    def forget_edit(self, message_id: int) -> None:
        """The message being edited was deleted: the edit ends (the typed text stays)."""
        if self._editing == message_id:
            self._cancel_edit()

    def _cancel_edit(self) -> None:
        self._editing = None
        self.view.set_editing(None)
        self.edit_banner.setVisible(False)

    def navigate(self, message_id: int, delta: int) -> None:
        if self.generating:
            return
        try:
            siblings = settle(library(self.host.session).siblings(message_id))
            ids = [m.id for m in siblings]
            index = ids.index(message_id) + delta
            if not 0 <= index < len(ids):
                return
            leaf = settle(library(self.host.session).show_branch(self.cid, ids[index]))
        except (LlamaDeskError, ValueError) as exc:
            self.notify(str(exc))
            return
        self.load_thread(leaf)

    @Slot()
    def stop(self) -> None:
        self.tool_turns.stop()  # a tool round under way: its call is denied or cancelled
        if self.generating:
            self.host.session.stop(self.cid)

    @Slot()
    def _on_escape(self) -> None:
        if self._editing is not None:
            self._cancel_edit()
            self.composer.clear()
        else:
            self.stop()

    # the conversation's choices in the status line (see TabChoices)

    def tab_policy(self) -> ContextFullPolicy | None:
        return self.choices.tab_policy()

    def effective_policy(self) -> ContextFullPolicy:
        return self.choices.effective_policy()

    def thinking_enabled(self) -> bool:
        return self.choices.thinking_enabled()

    def reasoning_effort(self) -> str:
        return self.choices.reasoning_effort()

    def set_reasoning_support(self, thinking_toggle: bool, effort: bool) -> None:
        self.choices.set_reasoning_support(thinking_toggle, effort)

    @Slot(str, int)
    def _on_action(self, name: str, message_id: int) -> None:
        if name == "copy":
            widget = self.view.widget_for(message_id)
            clipboard = QGuiApplication.clipboard()
            if widget is not None and clipboard is not None:
                clipboard.setText(widget.data.content)  # the answer only, not the reasoning
        elif name == "edit":
            self.edit(message_id)
        elif name == "regenerate":
            self.regenerate(message_id)
        elif name == "fork":
            if not self.generating:
                self.host.fork_tab(self.cid, message_id)
        elif name == "delete":  # asked first; the session deletes it (app.ui.message_delete)
            ask_delete(self, self, message_id)
        elif name == "prev":
            self.navigate(message_id, -1)
        elif name == "next":
            self.navigate(message_id, +1)

    # ------------------------------------------------------------------ generation

    def reply_text(self) -> str:
        return self.reply.text()

    def reasoning_text(self) -> str:
        return self.reply.reasoning_text()

    @Slot(object)
    def on_event(self, event: object) -> None:
        """This conversation's session events (on the GUI thread)."""
        note_event(self, event)
        self.turn.on_event(event)
        self.tool_turns.on_event(event)

    def on_finished(self, result: TurnResult) -> None:
        self.turn.on_finished(result)

    def on_status(self, event: StatusEvent) -> None:
        """A session event about the conversation's sequence or cache (typed as it came)."""
        if isinstance(event, ev.CacheRestored):
            self.turns_since_open = 0
        self.show_figures(self.info.apply(event))

    def show_figures(self, figures: TabFigures) -> None:
        dropped = figures.n_dropped != self.info.n_dropped
        self.info = figures
        if dropped:
            self._sync_context_start()
        self.update_status()

    def flush(self, visible: bool) -> float | None:
        """Paint buffered text (when shown); returns the perf_counter time at which the oldest painted text was sampled, or None."""
        if self.reply_id is None:
            return None
        painted = self.reply.paint(self.view.last()) if visible else None
        if painted is not None:
            self.view.fit_to_text()  # the grown reply laid out once, not squeezed first
        if self.state is TabState.GENERATING and self.reply.gen_started:
            # the speed and the meter a few times a second, not at every paint: each
            # update lays the status line out and repaints the meter
            now = time.perf_counter()
            if now - self._status_at >= STATUS_INTERVAL_S:
                self._status_at = now
                self.reply.measure_speed()
                self.update_status()
        return painted

    # ------------------------------------------------------------------ status

    def set_font_size(self, points: int) -> None:
        """The chat's text size (a preference; 0: the system's)."""
        size = float(points) if points > 0 else QApplication.font().pointSizeF()
        for widget in (self.view, self.composer):
            font = widget.font()
            if font.pointSizeF() != size:
                font.setPointSizeF(size)
                widget.setFont(font)
        self.composer.refit()

    def set_compact(self, compact: bool) -> None:
        """A narrow window: shorter labels, so nothing overlaps."""
        self._compact = compact
        self.settings_button.setText("Settings" if compact else "Conversation settings")
        self.update_status()

    def state_text(self) -> str:
        quiet = self.reply.quiet_s() if self.generating else 0.0
        text = state_text(
            self.state,
            self.prompt_progress,
            self.reply.tok_s,
            self.info,
            quiet if quiet >= QUIET_S else 0.0,
        )
        if self.server_failed and self.state is TabState.IDLE:
            text = text.replace("idle", "the last reply failed (see the notice)", 1)
        sharing = self.sharing_text()
        return f"{text} · {sharing}" if sharing else text

    def sharing_text(self) -> str:
        """Why this tab writes slower now: others write too, on the same threads."""
        model = self.host.loaded_model()
        if not self.generating or model is None:
            return ""
        return sharing_text(self.host.generating_count(), model.settings.n_threads)

    def context_start(self) -> int | None:
        """The first message the model still sees, when earlier ones were left out."""
        n_dropped = self.info.n_dropped
        if n_dropped <= 0:
            return None
        # the messages the engine got (engine_messages: empty failed replies left out)
        sent = [m for m in self.branch if not (m.role == "assistant" and not m.content)]
        return sent[n_dropped].id if n_dropped < len(sent) else None

    def update_status(self) -> None:
        max_tokens = self.conversation.sampling.get("max_tokens")
        estimate = chat_token_estimate(self.branch)
        streamed = self.reply.gen_tokens if self.generating else 0
        figures = MeterFigures.of(
            self.info,
            estimate,
            max_tokens if isinstance(max_tokens, int) else None,
            streamed,
            estimate_only=self.count_stale and not self.generating,
        )
        if figures.n_ctx:
            self.meter.set_figures(figures.n, figures.reserved, figures.n_ctx)
            self.meter_label.setText(figures.text(self._compact))
            tip = figures.tip()
            self.meter.setToolTip(tip)
            self.meter_label.setToolTip(tip)
        else:
            self.meter.set_figures(0, 0, 0)
            # a server that does not say its context size: the chat's tokens, about
            ready = self.host.model_ready()
            self.meter_label.setText(
                f"~{tokens_text(estimate + streamed)}" if ready else "no model"
            )
            tip = "The server does not say its context size; this chat's tokens, about."
            self.meter_label.setToolTip(tip if ready else "")
        self.state_label.setText(self.state_text())
        tip = state_tip(self.state, self.info)
        if self.sharing_text():
            tip = "\n".join(t for t in (tip, sharing_tip(self.host.loaded_model())) if t)
        # the whole state where the label ends it with "…" (a narrow window)
        self.state_label.setToolTip(tip or self.state_label.text())
        self.tools.context_changed()
