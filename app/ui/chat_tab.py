"""One chat tab: a conversation bound to one engine sequence.

The tab keeps the branch it shows (storage messages), subscribes to its conversation's
session events (``worker.stream(cid)``), streams the reply into the last message widget
(rendered by the window's flush timer, never per token) and finishes it with the figures;
the session saves the reply while it streams. A reasoning model's reply comes in two
parts, its reasoning (``on_reasoning``) then its answer (``on_tokens``); both are shown,
saved and finished apart. The "Thinking" and "Effort" choices of the conversation (shown
only when the model's template uses them) are kept with its sampling settings and go to
the engine with each turn.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from PySide6.QtCore import Qt, QTimer, Signal, Slot
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import (
    QApplication,
    QCheckBox,
    QComboBox,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QSizePolicy,
    QToolButton,
    QVBoxLayout,
    QWidget,
)
from shiboken6 import isValid

from app.engine import SamplingParams
from app.engine.errors import context_advice
from app.engine.reasoning import Channel
from app.errors import LlamaDeskError
from app.session import (
    ChatMessage,
    ContextFullPolicy,
    FinishReason,
    RestoreOutcome,
    TurnResult,
    policy_of,
    reasoning_options,
)
from app.session import events as ev
from app.session.types import DEFAULT_EFFORT, EFFORT_KEY, POLICY_KEY, THINKING_KEY
from app.settings_schema import CONVERSATION_FIELDS
from app.storage import Conversation, Database, Message
from app.ui.chat_view import ChatView, MessageData
from app.ui.composer import Composer, ConversationSettings
from app.ui.context_meter import ContextMeter
from app.ui.field_editors import SpecComboBox, make_editor
from app.ui.message_bar import MessageBar

if TYPE_CHECKING:
    from app.session import Session
    from app.ui.worker import EngineWorker

# The tab's "When full" choice is kept with the conversation's settings (POLICY_KEY: the
# engine's SamplingParams ignores keys it does not know).
_RESTORE_REASON_CHARS = 90
# Messages from this length on show their token count before they are sent.
TOKEN_HINT_MIN_CHARS = 400
TOKEN_COUNT_DELAY_MS = 350


class TabHost(Protocol):
    """What a tab needs from the window."""

    db: Database
    worker: EngineWorker  # this tab's event stream: worker.stream(conversation id)
    session: Session  # commands

    def model_ready(self) -> bool: ...

    def model_path(self) -> str | None: ...

    def show_message(self, text: str, error: bool = True) -> None: ...

    def fork_from(self, tab: ChatTab, message_id: int) -> None: ...

    def conversation_changed(self, conversation_id: int) -> None: ...

    def tab_state_changed(self, tab: ChatTab) -> None: ...

    def context_policy(self) -> str: ...

    def trained_context(self) -> int:
        """The loaded model's training context (0: no model or unknown)."""
        ...

    def reasoning_support(self) -> tuple[bool, bool]:
        """Whether the loaded model's template uses (the thinking toggle, the effort)."""
        ...


def message_data(db: Database, m: Message, with_siblings: bool = True) -> MessageData:
    index, count = 1, 1
    if with_siblings:
        try:
            index, count = db.sibling_position(m.id)
        except LlamaDeskError:
            pass
    processed = m.meta.get("prompt_processed") if m.meta else None
    cached = None
    if m.prompt_tokens is not None and isinstance(processed, int):
        cached = max(0, m.prompt_tokens - processed)
    error = m.meta.get("error") if m.meta and m.status == "error" else None
    meta = m.meta or {}
    finish = meta.get("finish_reason")
    ttft = meta.get("ttft_ms")
    return MessageData(
        id=m.id,
        role=m.role,
        content=m.content,
        status=m.status,
        token_count=m.token_count,
        prompt_tokens=m.prompt_tokens,
        tokens_per_second=m.tokens_per_second,
        sibling_index=index,
        sibling_count=count,
        error=str(error) if error else None,
        cached_tokens=cached,
        reasoning=getattr(m, "reasoning", "") or "",
        reasoning_ms=getattr(m, "reasoning_ms", None),
        finish=str(finish) if finish else None,
        ttft_ms=float(ttft) if isinstance(ttft, (int, float)) else None,
    )


def engine_messages(thread: list[Message]) -> list[dict[str, Any]]:
    """The chat as the engine wants it: roles and text, without empty failed replies; an
    assistant message's reasoning goes as ``reasoning_content`` (the template keeps or
    drops it)."""
    out: list[dict[str, Any]] = []
    for m in thread:
        if m.role == "assistant" and not m.content:
            continue
        message: dict[str, Any] = {"role": m.role, "content": m.content}
        reasoning = getattr(m, "reasoning", "")
        if m.role == "assistant" and reasoning:
            message["reasoning_content"] = reasoning
        out.append(message)
    return out


def chat_messages(thread: list[Message]) -> list[ChatMessage]:
    """:func:`engine_messages` as the session's typed messages."""
    return [
        ChatMessage(m["role"], m["content"], m.get("reasoning_content", ""))
        for m in engine_messages(thread)
    ]


class ChatTab(QWidget):
    """See the module docstring."""

    titleChanged = Signal()

    def __init__(
        self, host: TabHost, conversation: Conversation, leaf_id: int | None = None
    ) -> None:
        super().__init__()
        self.host = host
        self.db = host.db
        self.conversation = conversation
        self.cid = conversation.id
        self.branch: list[Message] = []
        self.generating = False
        self.reply_id: int | None = None
        self._parts: list[str] = []
        self._reasoning_parts: list[str] = []
        self._reasoning_ms: float | None = None  # measured here when the answer starts
        self._dirty = False
        self._oldest_unpainted: float | None = None
        self._error: str | None = None
        self._editing: int | None = None
        self._state = "idle"
        self._prompt = (0, 0)
        self._tok_s = 0.0
        self._gen_tokens = 0
        self._gen_started = 0.0
        self._submitted_at = 0.0
        self._first_token_ms: float | None = None
        self.info: dict[str, Any] = {}
        self._turns_since_open = 0
        self._compact = False
        self._context_start: int | None = None
        self.last_completion: TurnResult | None = None
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
        layout.addWidget(self.notice)

        # status line: context meter, state, what happens when full, settings toggle
        status = QHBoxLayout()
        status.setContentsMargins(8, 2, 8, 2)
        self.meter = ContextMeter()
        self.meter.setObjectName("context-meter")
        self.meter_label = QLabel()
        self.meter_label.setObjectName("context-label")
        self.state_label = QLabel("idle")
        self.state_label.setObjectName("state-label")
        # a long state (a restore refusal's reason) is cut, never widens the window
        self.state_label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        # "When full" is a conversation setting (its labels and help from the schema).
        policy_spec = CONVERSATION_FIELDS[POLICY_KEY]
        policy = make_editor(policy_spec)
        assert isinstance(policy, SpecComboBox)
        self.policy = policy
        self.policy.setObjectName("context-policy")
        self.policy.activated.connect(self._on_policy)
        self.settings_button = QToolButton()
        self.settings_button.setText("Conversation settings")
        self.settings_button.setToolTip(
            "This conversation's system prompt, sampling and what happens when the context is full"
        )
        self.settings_button.setCheckable(True)
        self.settings_button.setObjectName("conversation-settings-toggle")
        status.addWidget(self.meter)
        status.addWidget(self.meter_label)
        status.addSpacing(12)
        status.addWidget(self.state_label, 1)
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
        status.addWidget(self.thinking)
        status.addWidget(self.effort)
        status.addWidget(self.settings_button)
        layout.addLayout(status)

        self.settings = ConversationSettings(self)
        self.settings.setVisible(False)
        self.settings_button.toggled.connect(self.settings.setVisible)
        self.settings.set_values(conversation.system_prompt, conversation.sampling)
        self.settings.add_row(policy_spec.label, self.policy)
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
        self.token_hint = QLabel()
        self.token_hint.setObjectName("token-hint")
        self.token_hint.setWordWrap(True)
        self.token_hint.setContentsMargins(8, 2, 8, 0)
        self.token_hint.setVisible(False)
        layout.addWidget(self.token_hint)
        self._count_serial = 0
        self._count_timer = QTimer(self)
        self._count_timer.setSingleShot(True)
        self._count_timer.setInterval(TOKEN_COUNT_DELAY_MS)
        self._count_timer.timeout.connect(self._count_tokens)

        row = QHBoxLayout()
        row.setContentsMargins(8, 4, 8, 8)
        self.composer = Composer(self)
        self.composer.sendRequested.connect(self.send)
        self.composer.stopRequested.connect(self._on_escape)
        self.composer.textChanged.connect(self._on_composer_changed)
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

        self._init_policy()
        self._init_reasoning()
        self.load_thread(leaf_id)
        self._update_status()

    # ------------------------------------------------------------------ data

    @property
    def title(self) -> str:
        return self.conversation.title or "New chat"

    def reload_conversation(self) -> None:
        try:
            self.conversation = self.db.get_conversation(self.cid, include_deleted=True)
        except LlamaDeskError:
            return
        self.titleChanged.emit()

    def load_thread(self, leaf_id: int | None = None) -> None:
        try:
            self.branch = self.db.get_thread(self.cid, leaf_id)
        except LlamaDeskError:
            self.branch = self.db.get_thread(self.cid)
        self.view.set_messages([message_data(self.db, m) for m in self.branch])
        self._sync_context_start()
        self.view.set_placeholder(
            "Say hello: type a message below and press Enter."
            if self.host.model_ready()
            else "No model is loaded yet. Choose one with “Load a model” above (the "
            "library, a GGUF file, or Models ▸ Discover… to download one), then come back here."
        )

    def _show_branch(self) -> None:
        """Show ``branch``, keeping the widgets of the messages already shown in front (a
        new turn adds two widgets instead of rebuilding, and querying, the whole chat)."""
        shown = [w.data.id for w in self.view.messages()]
        keep = 0
        for widget_id, message in zip(shown, self.branch, strict=False):
            if widget_id != message.id:
                break
            keep += 1
        self.view.setUpdatesEnabled(False)
        try:
            self.view.keep_first(keep)
            for message in self.branch[keep:]:
                self.view.append(message_data(self.db, message))
        finally:
            self.view.setUpdatesEnabled(True)
        self._sync_context_start()
        self.view.follow = True
        self.view.scroll_to_end()

    def _sync_context_start(self) -> None:
        """Mark where the messages the model still sees begin (the view keeps the mark)."""
        start = self.context_start()
        if start != self._context_start:
            self._context_start = start
            self.view.set_context_start(start)

    def leaf_id(self) -> int | None:
        return self.branch[-1].id if self.branch else None

    def save_settings(self) -> None:
        self._settings_timer.stop()
        system, sampling = self.settings.values()
        if system == self.conversation.system_prompt and sampling == self.conversation.sampling:
            return
        try:
            self.db.update_conversation_settings(self.cid, system_prompt=system, sampling=sampling)
            self.conversation = self.db.get_conversation(self.cid)
        except LlamaDeskError as exc:
            self.notify(str(exc))

    def notify(
        self,
        text: str,
        error: bool = True,
        action: tuple[str, Callable[[], None]] | None = None,
    ) -> None:
        """A notice in this tab (errors stay until dismissed, the rest for a while)."""
        self.notice.show_message(text, error, action, timeout_ms=0 if error else 8000)

    # ------------------------------------------------------------------ token count

    @Slot()
    def _on_composer_changed(self) -> None:
        self._count_serial += 1  # a count under way is stale now
        if len(self.composer.toPlainText()) < TOKEN_HINT_MIN_CHARS or not self.host.model_ready():
            self._count_timer.stop()
            self.token_hint.setVisible(False)
            return
        self._count_timer.start()

    @Slot()
    def _count_tokens(self) -> None:
        text = self.composer.toPlainText()
        serial = self._count_serial
        self.host.worker.call(
            lambda engine: len(engine.tokenize(text, False, True)),
            lambda result: self._show_count(serial, result),
        )

    def _show_count(self, serial: int, result: object) -> None:
        if not isValid(self) or serial != self._count_serial or not isinstance(result, int):
            return
        n_ctx = int(self.info.get("n_ctx", 0))
        reserve = int(self.info.get("n_reserved", 0))
        room = n_ctx - reserve
        too_long = bool(n_ctx) and result > room
        if too_long:
            advice = context_advice(n_ctx, self.host.trained_context())
            text = (
                f"This message is {result:,} tokens: more than the context can take "
                f"({room:,} of its {n_ctx:,} tokens, the rest kept for the reply): "
                f"{advice[0].upper()}{advice[1:]}."
            )
        else:
            text = f"This message is {result:,} tokens."
        self.token_hint.setText(text)
        self.token_hint.setProperty("error", too_long)
        self.token_hint.setStyleSheet("color: #d33;" if too_long else "")
        self.token_hint.setVisible(True)

    # ------------------------------------------------------------------ user actions

    @Slot()
    def send(self) -> None:
        text = self.composer.toPlainText().strip()
        if not text:
            return
        if self.generating:
            self.notify("This tab is still answering: stop it first (Esc).", False)
            return
        if not self.host.model_ready():
            self.notify(
                "Load a model first: choose one with “Load a model” above, or in Models ▸ "
                "Model manager."
            )
            return
        parent = self.leaf_id()
        if self._editing is not None:
            try:
                parent = self.db.get_message(self._editing).parent_id
            except LlamaDeskError as exc:
                self.notify(str(exc))
                return
        try:
            user = self.db.add_message(self.cid, "user", text, parent_id=parent)
        except LlamaDeskError as exc:
            self.notify(str(exc))
            return
        self.composer.clear()
        self._cancel_edit()
        self.reload_conversation()
        self.host.conversation_changed(self.cid)
        self._generate(user.id)

    def regenerate(self, message_id: int) -> None:
        if self.generating or not self.host.model_ready():
            return
        try:
            message = self.db.get_message(message_id)
        except LlamaDeskError as exc:
            self.notify(str(exc))
            return
        if message.parent_id is None:
            return
        self._generate(message.parent_id)

    def edit(self, message_id: int) -> None:
        if self.generating:
            return
        try:
            message = self.db.get_message(message_id)
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

    def _cancel_edit(self) -> None:
        self._editing = None
        self.view.set_editing(None)
        self.edit_banner.setVisible(False)

    def navigate(self, message_id: int, delta: int) -> None:
        if self.generating:
            return
        try:
            siblings = self.db.siblings(message_id)
            ids = [m.id for m in siblings]
            index = ids.index(message_id) + delta
            if not 0 <= index < len(ids):
                return
            leaf = self.db.leaf_of(ids[index])
            self.db.set_current_leaf(self.cid, leaf)
        except (LlamaDeskError, ValueError) as exc:
            self.notify(str(exc))
            return
        self.load_thread(leaf)

    @Slot()
    def stop(self) -> None:
        if self.generating:
            self.host.session.stop(self.cid)

    @Slot()
    def _on_escape(self) -> None:
        if self._editing is not None:
            self._cancel_edit()
            self.composer.clear()
        else:
            self.stop()

    def tab_policy(self) -> ContextFullPolicy | None:
        """This tab's own context-full policy (None: it follows the default)."""
        return policy_of(self.conversation.sampling)

    def effective_policy(self) -> str:
        return str(self.tab_policy() or self.host.context_policy())

    def _init_policy(self) -> None:
        # the window opens the conversation in the session with tab_policy()
        index = self.policy.findData(self.effective_policy())
        if index >= 0:
            self.policy.setCurrentIndex(index)

    @Slot(int)
    def _on_policy(self, index: int) -> None:
        policy = ContextFullPolicy.parse(self.policy.itemData(index))
        if policy is None or policy == self.tab_policy():
            return
        self.settings.set_extra(POLICY_KEY, policy.value)
        self.save_settings()
        self.host.session.set_policy(self.cid, policy)

    def thinking_enabled(self) -> bool:
        """This conversation's "Thinking" choice (default on, as llama.cpp's server)."""
        return self.conversation.sampling.get(THINKING_KEY, True) is not False

    def reasoning_effort(self) -> str:
        effort = self.conversation.sampling.get(EFFORT_KEY)
        return effort if effort in ("low", "medium", "high") else DEFAULT_EFFORT.value

    def _init_reasoning(self) -> None:
        self.thinking.blockSignals(True)
        self.thinking.setChecked(self.thinking_enabled())
        self.thinking.blockSignals(False)
        index = self.effort.findData(self.reasoning_effort())
        if index >= 0:
            self.effort.setCurrentIndex(index)
        self.set_reasoning_support(*self.host.reasoning_support())

    def set_reasoning_support(self, thinking_toggle: bool, effort: bool) -> None:
        """Show the reasoning controls the loaded model's template uses (hide the others)."""
        self.thinking.setVisible(thinking_toggle)
        self.effort.setVisible(effort)
        self.effort.setEnabled(not thinking_toggle or self.thinking.isChecked())

    @Slot(bool)
    def _on_thinking(self, enabled: bool) -> None:
        self.effort.setEnabled(enabled or self.thinking.isHidden())
        if enabled == self.thinking_enabled():
            return
        self.settings.set_extra(THINKING_KEY, enabled)
        self.save_settings()

    @Slot(int)
    def _on_effort(self, index: int) -> None:
        effort = str(self.effort.itemData(index))
        if effort == self.reasoning_effort() and EFFORT_KEY in self.conversation.sampling:
            return
        self.settings.set_extra(EFFORT_KEY, effort)
        self.save_settings()

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
                self.host.fork_from(self, message_id)
        elif name == "prev":
            self.navigate(message_id, -1)
        elif name == "next":
            self.navigate(message_id, +1)

    # ------------------------------------------------------------------ generation

    def _generate(self, parent_id: int) -> None:
        self.save_settings()
        self.notice.dismiss()  # a notice of an earlier turn (its "Try again") is old news
        try:
            reply = self.db.begin_reply(self.cid, parent_id, model_path=self.host.model_path())
            self.branch = self.db.get_thread(self.cid, reply.id)
        except LlamaDeskError as exc:
            self.notify(str(exc))
            return
        history = chat_messages(self.branch[:-1])
        self._show_branch()
        last = self.view.last()
        if last is not None:
            last.set_streaming(True)
        self.view.set_actions_enabled(False)
        self.reply_id = reply.id
        self._parts = []
        self._reasoning_parts = []
        self._reasoning_ms = None
        self._dirty = False
        self._oldest_unpainted = None
        self._error = None
        self._gen_tokens = 0
        self._gen_started = 0.0
        self._submitted_at = time.perf_counter()
        self._first_token_ms = None
        self._tok_s = 0.0
        self._set_generating(True)
        self._state = "queued"
        self._update_status()
        sampling = self.conversation.sampling
        try:
            params = SamplingParams.from_dict(sampling)
        except (LlamaDeskError, TypeError, ValueError) as exc:
            self.on_failed(str(exc))
            self.on_finished(TurnResult(finish_reason=FinishReason.ERROR, error=str(exc)))
            return
        self.host.session.submit(
            self.cid,
            history,
            self.conversation.system_prompt,
            params,
            reasoning_options(sampling),
            reply_id=reply.id,  # the session saves it as it streams
        )

    def _set_generating(self, generating: bool) -> None:
        self.generating = generating
        self.send_button.setVisible(not generating)
        self.stop_button.setVisible(generating)
        self.titleChanged.emit()
        self.host.tab_state_changed(self)

    def reply_text(self) -> str:
        return "".join(self._parts)

    def reasoning_text(self) -> str:
        return "".join(self._reasoning_parts)

    def _thinking_ms(self) -> float | None:
        """How long the reply has thought: until its answer started, else until now."""
        if not self._reasoning_parts:
            return None
        if self._reasoning_ms is not None:
            return self._reasoning_ms
        if not self._gen_started:
            return None
        return (time.perf_counter() - self._gen_started) * 1000.0

    # this conversation's session events (on the GUI thread)

    @Slot(object)
    def on_event(self, event: object) -> None:
        match event:
            case ev.TextStreamed():
                if event.channel is Channel.REASONING:
                    self.on_reasoning(event.text, event.n_tokens, event.sampled_at)
                else:
                    self.on_tokens(event.text, event.n_tokens, event.sampled_at)
            case ev.PromptProgressed():
                self.on_progress(event.done, event.total)
            case ev.TurnStarted():
                self.on_started(event.n_to_process)
            case ev.TurnFinished():
                self.on_finished(event.result)
            case ev.TurnFailed():
                self.on_failed(event.message)
            case ev.ContextShifted():
                self.on_shifted(event.n_discarded)
            case ev.SequenceStatus():
                self.on_info(
                    {
                        "n_tokens": event.n_tokens,
                        "n_ctx": event.n_ctx,
                        "n_reserved": event.n_reserved,
                        "n_dropped": event.n_dropped,
                        "resident": event.resident,
                        "busy": event.busy,
                        "generating": event.generating,
                    }
                )
            case ev.CacheRestored():
                self.on_info(
                    {
                        "restored": event.outcome is RestoreOutcome.RESTORED,
                        "parked": event.reason if event.outcome is RestoreOutcome.PARKED else None,
                        "restore_error": event.reason
                        if event.outcome is RestoreOutcome.REREAD
                        else None,
                    }
                )
            case ev.CacheParked():
                self.on_info({"saved": event.saved, "resident": False})
            case ev.ConversationForked():
                self.on_info({"forked": True})

    def on_started(self, n_to_process: int) -> None:
        if self._turns_since_open >= 1:  # what happened at restore is old news now
            self.info.pop("restored", None)
            self.info.pop("parked", None)
            self.info.pop("restore_error", None)
        self._state = "prompt"
        self._prompt = (0, n_to_process)
        self._update_status()

    def on_progress(self, done: int, total: int) -> None:
        self._state = "prompt"
        self._prompt = (done, total)
        self._update_status()

    def on_reasoning(self, text: str, n_tokens: int, sampled_at: float) -> None:
        """Streamed reasoning (it comes before the answer)."""
        if not self.generating:
            return
        if self._state != "generating":
            self._state = "generating"
            self._gen_started = time.perf_counter()
            self._first_token_ms = (self._gen_started - self._submitted_at) * 1000.0
        self._reasoning_parts.append(text)
        self._gen_tokens += n_tokens
        self._dirty = True
        if self._oldest_unpainted is None:
            self._oldest_unpainted = sampled_at

    def on_tokens(self, text: str, n_tokens: int, sampled_at: float) -> None:
        if not self.generating:
            return
        if self._state != "generating":
            self._state = "generating"
            self._gen_started = time.perf_counter()
            self._first_token_ms = (self._gen_started - self._submitted_at) * 1000.0
        if self._reasoning_parts and self._reasoning_ms is None:
            self._reasoning_ms = (time.perf_counter() - self._gen_started) * 1000.0
        self._parts.append(text)
        self._gen_tokens += n_tokens
        self._dirty = True
        if self._oldest_unpainted is None:
            self._oldest_unpainted = sampled_at

    def on_failed(self, message: str) -> None:
        # Said once, when the turn finishes (on_finished), in this tab's notice.
        self._error = message

    def on_shifted(self, n_discarded: int) -> None:
        self.notify(
            f"The context was full: the oldest {n_discarded} tokens of this conversation were "
            "dropped (the system prompt is kept).",
            False,
        )

    def on_info(self, info: dict[str, Any]) -> None:
        if "restored" in info:
            self._turns_since_open = 0
        self.info = {**self.info, **info}
        if "n_dropped" in info:
            self._sync_context_start()
        if "saved" in info and not info.get("resident", True):
            self.info["on_disk"] = bool(info["saved"])
        elif info.get("resident"):
            self.info["on_disk"] = False
        self._update_status()

    def on_finished(self, result: TurnResult) -> None:
        self.last_completion = result
        self._turns_since_open += 1
        if self.reply_id is None:
            return
        reason = result.finish_reason
        error = result.error or self._error
        text = result.text or self.reply_text()
        reasoning = result.reasoning or self.reasoning_text()
        reasoning_ms = result.reasoning_ms
        if reasoning and reasoning_ms is None:
            reasoning_ms = self._thinking_ms()
        if reason is FinishReason.ABORTED:
            status = "stopped"
        elif reason is FinishReason.ERROR or (error and reason is not FinishReason.CONTEXT_FULL):
            status = "error"
        else:
            status = "complete"
        meta: dict[str, Any] = {
            "finish_reason": reason.value,
            "prompt_processed": result.n_prompt_processed,
            "prompt_ms": round(result.prompt_ms, 1),
            "gen_ms": round(result.gen_ms, 1),
        }
        if self._first_token_ms is not None:
            # what the user waited: from Send to the first token on screen
            meta["ttft_ms"] = round(self._first_token_ms, 1)
        if error:
            meta["error"] = error
        if reason is FinishReason.CONTEXT_FULL and not error:
            # "Stop the reply" when full: say why it stopped, and what would go on
            error = (
                "The context is full, so the reply stopped here. Start a new chat, fork from "
                "an earlier message, or set “When the context is full” to drop the oldest "
                "messages in Conversation settings."
            )
            meta["error"] = error
        if error or status == "error":
            # Said once, in this tab (also a full context that stopped the reply).
            self._report_error(error or "The reply failed.", failed=status == "error")
            if not text and not reasoning:
                # Nothing was written: an error is not an assistant message.
                self._drop_failed_reply()
                return
        self._finish_reply(
            text,
            status,
            token_count=result.n_tokens or None,
            prompt_tokens=result.n_prompt or None,
            tokens_per_second=result.tokens_per_second or None,
            meta=meta,
            reasoning=reasoning or None,
            reasoning_ms=reasoning_ms if reasoning else None,
        )

    def _report_error(self, message: str, failed: bool = True) -> None:
        """``failed``: the turn failed (else the reply stopped early, e.g. a full context
        with "Stop the reply": a notice, not an error)."""
        parent = self._reply_parent()
        retry = (
            ("Try again", lambda: self._retry(parent)) if parent is not None and failed else None
        )
        self.notify(message, failed or not self._parts, retry)

    def _reply_parent(self) -> int | None:
        if self.reply_id is None:
            return None
        for message in self.branch:
            if message.id == self.reply_id:
                return message.parent_id
        return None

    def _retry(self, parent_id: int | None) -> None:
        if parent_id is not None and not self.generating and self.host.model_ready():
            self._generate(parent_id)

    def _drop_failed_reply(self) -> None:
        """Remove the empty reply of a failed turn (the user's message stays, ready for
        "Try again" or an edit)."""
        reply_id, self.reply_id = self.reply_id, None
        self._parts = []
        self._reasoning_parts = []
        self._dirty = False
        self._oldest_unpainted = None
        self._set_generating(False)
        self._state = "idle"
        if reply_id is not None:
            try:
                self.db.delete_branch(reply_id)
            except LlamaDeskError as exc:
                self.notify(str(exc))
        self.load_thread()
        self.view.set_actions_enabled(True)
        self._update_status()
        self.reload_conversation()
        self.host.conversation_changed(self.cid)

    def _finish_reply(self, text: str, status: str, **figures: Any) -> None:
        reply_id, self.reply_id = self.reply_id, None
        self._parts = [text]
        if figures.get("reasoning"):
            self._reasoning_parts = [figures["reasoning"]]
        self._dirty = False
        self._oldest_unpainted = None
        self._set_generating(False)
        self._state = "idle"
        if reply_id is None:
            return
        try:
            message = self.db.finish_reply(reply_id, text, status, **figures)
        except LlamaDeskError as exc:
            self.notify(str(exc))
            return
        if self.branch and self.branch[-1].id == reply_id:
            self.branch[-1] = message
        widget = self.view.widget_for(reply_id)
        if widget is not None:
            widget.set_streaming(False)
            widget.update_data(message_data(self.db, message))
        self.view.set_actions_enabled(True)
        self._update_status()
        self.reload_conversation()
        self.host.conversation_changed(self.cid)

    def finish_for_shutdown(self) -> None:
        """Save the reply as it is (stopped) when the window closes mid-generation."""
        if self.reply_id is not None:
            reasoning = self.reasoning_text()
            self._finish_reply(
                self.reply_text(),
                "stopped",
                meta={"finish_reason": "aborted"},
                reasoning=reasoning or None,
                reasoning_ms=self._thinking_ms() if reasoning else None,
            )

    def flush(self, visible: bool) -> float | None:
        """Paint buffered text (when shown); returns the perf_counter time at which the oldest painted text was sampled, or None."""
        painted: float | None = None
        if self.reply_id is None:
            return None
        if self._dirty and visible:
            widget = self.view.last()
            if widget is not None:
                if self._reasoning_parts:
                    widget.set_reply(self.reply_text(), self.reasoning_text(), self._reasoning_ms)
                else:
                    widget.set_content(self.reply_text())
            self._dirty = False
            painted, self._oldest_unpainted = self._oldest_unpainted, None
        if self._state == "generating" and self._gen_started:
            elapsed = time.perf_counter() - self._gen_started
            if elapsed > 0.2:
                self._tok_s = self._gen_tokens / elapsed
            self._update_status()
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
        self._update_status()

    def state_text(self) -> str:
        if self._state == "queued":
            return "waiting…"
        if self._state == "prompt":
            done, total = self._prompt
            percent = int(100 * done / total) if total else 0
            return f"processing prompt {percent}%"
        if self._state == "generating":
            return f"generating at {self._tok_s:.1f} tok/s" if self._tok_s else "generating"
        if self.info.get("on_disk"):
            return "idle · saved to disk"
        if self.info.get("restored"):
            return "idle · cache restored from disk"
        if self.info.get("parked"):
            # saved, waiting for room in the context: it comes back when this chat is used
            return "idle · cache waiting for room (restored when you send)"
        reason = self.info.get("restore_error")
        if reason:
            reason = str(reason).strip()
            if len(reason) > _RESTORE_REASON_CHARS:
                reason = reason[: _RESTORE_REASON_CHARS - 1].rstrip() + "…"
            return f"idle · cache re-processed: {reason}"
        return "idle"

    def context_start(self) -> int | None:
        """The first message the model still sees, when earlier ones were left out."""
        n_dropped = int(self.info.get("n_dropped", 0))
        if n_dropped <= 0:
            return None
        # the messages the engine got (engine_messages: empty failed replies left out)
        sent = [m for m in self.branch if not (m.role == "assistant" and not m.content)]
        return sent[n_dropped].id if n_dropped < len(sent) else None

    def _update_status(self) -> None:
        n = int(self.info.get("n_tokens", 0))
        n_ctx = int(self.info.get("n_ctx", 0))
        reserved = int(self.info.get("n_reserved", 0))
        if n_ctx:
            # What the model sees: the held tokens and the room kept for the reply.
            used = min(n_ctx, n + reserved)
            self.meter.set_figures(n, reserved, n_ctx)
            if self._compact:
                text = f"{used:,}/{n_ctx:,}"
            elif reserved:
                text = f"{n:,} / {n_ctx:,} tokens · {reserved:,} kept for the reply"
            else:
                text = f"{n:,} / {n_ctx:,} tokens"
            self.meter_label.setText(text)
            tip = f"{n:,} tokens of this conversation are in the context of {n_ctx:,}"
            if reserved:
                tip += f", and {reserved:,} are kept free for the reply"
            dropped = int(self.info.get("n_dropped", 0))
            if dropped:
                tip += (
                    f". The {dropped:,} oldest messages no longer fit: the model does not "
                    "see them (the system prompt is kept)"
                )
            self.meter.setToolTip(tip + ".")
            self.meter_label.setToolTip(tip + ".")
        else:
            self.meter.set_figures(0, 0, 0)
            self.meter_label.setText("no model")
        text = self.state_text()
        self.state_label.setText(text)
        reason = self.info.get("restore_error")
        parked = self.info.get("parked")
        if reason and "re-processed" in text:
            tip = (
                "The saved cache of this conversation could not be used, so its text is read "
                f"again (information, nothing is lost): {reason}"
            )
        elif parked and "waiting for room" in text:
            tip = (
                "This conversation's cache is saved on disk; the context is busy with other "
                f"chats, so it is restored when you next send here: {parked}"
            )
        else:
            tip = ""
        self.state_label.setToolTip(tip)
