"""The session's vocabulary: ids, enums and the frozen records its events carry."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NewType

from app.engine import Completion, ContextSettings, ModelInfo
from app.engine.batching import BatchingChoice
from app.engine.chat_template import (
    ReasoningDefaults,
    ReasoningEffort,
    ReasoningOptions,
    TemplateChoice,
)

# One spelling of "shift" and "stop" (app.context_policy, via the engine), re-exported here.
from app.engine.context_policy import ContextFullPolicy as ContextFullPolicy
from app.engine.events import generation_rate
from app.engine.prefix import cached_tokens

# One shape per message, from storage to the template (app.messages), re-exported here.
from app.messages import ChatMessage as ChatMessage
from app.messages import MessageToolCall as MessageToolCall

ConversationId = NewType("ConversationId", int)
"""A conversation: the storage conversation id, or any opaque int a client chooses."""

TurnId = NewType("TurnId", int)
"""One submitted turn (unique within a session)."""


class FinishReason(enum.StrEnum):
    EOG = "eog"  # the model ended its turn
    LENGTH = "length"  # max_tokens
    STOP = "stop"  # a stop string
    TOOL_CALLS = "tool_calls"  # the reply ended with tool calls (``TurnResult.tool_calls``)
    ABORTED = "aborted"  # stopped by the user (or a close)
    CONTEXT_FULL = "context_full"
    ERROR = "error"

    @classmethod
    def parse(cls, value: str) -> FinishReason:
        try:
            return cls(value)
        except ValueError:
            return cls.ERROR


class RestoreOutcome(enum.StrEnum):
    """How a conversation's cache came back when its sequence was opened."""

    EMPTY = "empty"  # nothing saved: its text is processed with the next turn
    RESTORED = "restored"  # from its state file: the cache holds it
    REREAD = "reread"  # the state file was refused: its text is re-read with the next turn
    # Kept, not in the cache yet: other conversations hold the room (or every slot). It is
    # restored when this conversation is next used; a second CacheRestored then says
    # RESTORED, or REREAD with the reason.
    PARKED = "parked"


@dataclass(frozen=True)
class TurnResult:
    """The outcome of one turn (the engine's :class:`~app.engine.Completion`, frozen)."""

    text: str = ""
    finish_reason: FinishReason = FinishReason.ERROR
    n_tokens: int = 0
    n_prompt: int = 0
    n_prompt_processed: int = 0
    prompt_ms: float = 0.0
    gen_ms: float = 0.0
    error: str | None = None
    reasoning: str = ""
    reasoning_ms: float | None = None
    tokens: tuple[int, ...] = ()  # the generated token ids
    n_sampled: int = 0  # tokens sampled, the end-of-generation one included
    stream_ms: float = 0.0  # from the first sampled token to the last
    first_token_at: float = 0.0  # perf_counter() when the first token was sampled (0: none)
    # The reply's tool calls, parsed (arguments: the JSON text the model wrote), and a
    # sentence per call that broke, names no offered tool or does not fit its schema.
    tool_calls: tuple[MessageToolCall, ...] = ()
    tool_errors: tuple[str, ...] = ()
    n_drafted: int = 0  # speculative decoding: tokens guessed and verified
    n_accepted: int = 0  # ... and kept

    @classmethod
    def of(cls, completion: Completion) -> TurnResult:
        return cls(
            text=completion.text,
            finish_reason=FinishReason.parse(completion.finish_reason),
            n_tokens=len(completion.tokens)
            if completion.n_reply_tokens is None
            else completion.n_reply_tokens,
            n_prompt=completion.n_prompt,
            n_prompt_processed=completion.n_prompt_processed,
            prompt_ms=completion.prompt_ms,
            gen_ms=completion.gen_ms,
            error=completion.error,
            reasoning=completion.reasoning or "",
            reasoning_ms=completion.reasoning_ms,
            tokens=tuple(completion.tokens),
            n_sampled=completion.n_sampled,
            stream_ms=completion.stream_ms,
            first_token_at=completion.first_token_at,
            n_drafted=completion.n_drafted,
            n_accepted=completion.n_accepted,
            tool_calls=tuple(
                MessageToolCall(c.call_id, c.name, c.arguments_text) for c in completion.tool_calls
            ),
            tool_errors=tuple(completion.tool_errors),
        )

    @property
    def tokens_per_second(self) -> float:
        """The rate the window shows: the tokens sampled after the first, over the time
        from the first sampled token to the last (``stream_ms``).

        Neither the prompt nor the wait before the first token counts (they are
        ``prompt_ms``), and the first token comes from the prompt's logits, so two replies
        generated side by side get the same figure whatever their lengths. A result without
        sample times (``n_sampled == 0``) falls back to ``n_tokens / gen_ms``.
        """
        return generation_rate(self.n_tokens, self.gen_ms, self.n_sampled, self.stream_ms)

    @property
    def cached_tokens(self) -> int:
        """Prompt tokens taken from the cache (the API's ``cached_tokens``)."""
        return cached_tokens(self.n_prompt, self.n_prompt_processed)

    @property
    def prompt_tokens_per_second(self) -> float:
        n = self.n_prompt_processed
        return n / (self.prompt_ms / 1000.0) if self.prompt_ms > 0 and n else 0.0


@dataclass(frozen=True)
class RecordedTurn:
    """What ``Session.answer`` recorded before its turn started: the user's message (None:
    a regenerate, no new message) and the reply it streams into."""

    turn_id: TurnId
    user_message_id: int | None
    reply_message_id: int
    tool_message_ids: tuple[int, ...] = ()  # the tool results recorded before the reply


@dataclass(frozen=True)
class LoadedModel:
    """What is loaded, and the context it got."""

    info: ModelInfo
    settings: ContextSettings
    fingerprint: str
    model_bytes: int
    kv_bytes: int
    n_ctx: int  # what the context got (the settings may ask for more)
    n_ctx_seq: int
    supports_thinking_toggle: bool  # the template uses enable_thinking
    supports_effort: bool  # the template uses a reasoning effort
    engine: str = "llama.cpp"  # what runs it (a remote engine names itself)
    # Which chat template is in use and why (None: the engine does not say, e.g. remote).
    chat_template: TemplateChoice | None = None
    # One batched decode or tabs in turn, measured for this context (None: not said).
    batching: BatchingChoice | None = None
    # How its template reasons and whether a turn without a choice thinks (the engine's
    # rule); None: not known (an engine that cannot say).
    reasoning: ReasoningDefaults | None = None
    # How it was loaded, when the user must know (e.g. without the faster CPU kernels,
    # which crashed on this computer: app.engine.load_check); "" when nothing to say.
    notice: str = ""

    @property
    def path(self) -> str:
        return self.info.path


@dataclass(frozen=True)
class ConversationSnapshot:
    """What the session holds for a conversation (diagnostics, tests, the API's /slots)."""

    conversation_id: ConversationId
    open: bool
    tokens: tuple[int, ...] = ()
    n_ctx: int = 0
    resident: bool = False
    busy: bool = False
    policy: ContextFullPolicy | None = None  # its own choice (None: the default)
    default_policy: ContextFullPolicy = ContextFullPolicy.SHIFT
    reasoning: ReasoningOptions | None = None  # what its last turn asked for


# -- a conversation's stored settings (the sampling JSON) --------------------------------

POLICY_KEY = "context_full_policy"  # older conversations keep their policy in the sampling JSON
THINKING_KEY = "enable_thinking"  # bool; absent: the model's default (ReasoningDefaults)
EFFORT_KEY = "reasoning_effort"  # "low" | "medium" | "high"; absent: the template's default
# What the window's effort choice shows when the conversation stored none.
DEFAULT_EFFORT = ReasoningEffort.MEDIUM


def policy_of(sampling: Mapping[str, Any]) -> ContextFullPolicy | None:
    """A stored conversation's own context-full policy (None: it follows the default)."""
    return ContextFullPolicy.parse(sampling.get(POLICY_KEY))


def reasoning_options(sampling: Mapping[str, Any]) -> ReasoningOptions:
    """The reasoning choices a conversation's sampling dict holds. What it does not hold
    is None, the model's default: thinking per the engine's rule
    (:class:`~app.engine.chat_template.ReasoningDefaults`), the template's own effort."""
    enable = sampling.get(THINKING_KEY)
    effort: ReasoningEffort | None = None
    stored = sampling.get(EFFORT_KEY)
    if stored:
        try:
            effort = ReasoningEffort(str(stored))
        except ValueError:
            effort = None  # an unknown effort: the template's default, not a guess
    return ReasoningOptions(
        enable_thinking=enable if isinstance(enable, bool) else None, effort=effort
    )
