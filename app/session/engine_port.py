"""What the session asks of an engine: conversations and turns, not tokens and batches.

:class:`ConversationEngine` is the protocol the session runs on: load (an
:class:`EngineLoader`), open and close a conversation's sequence, submit a turn (a
:data:`Prompt`), stop, step and stream the engine's events, cut a cache, fork, save and
restore. :mod:`app.session.local_engine` adapts llama.cpp's :class:`~app.engine.Engine`;
a remote engine (an OpenAI-compatible server) or a test's fake implements the same.

What an engine cannot do it says in its :class:`Capability` flags, and the session falls
back: without ``FORK_CACHE`` a fork re-sends the text, without ``STATE_FILES`` caches are
neither saved nor restored (a turn re-reads its text), without ``TOKENS`` token and raw-text
prompts are refused with a sentence, without ``LOCAL_CALLS`` ``Session.call`` is.

Every method runs on the session thread, except :meth:`ConversationEngine.stop` (any
thread: it must reach a running generation between two steps).
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, TypeVar

from app.engine import ContextSettings, SamplingParams
from app.engine import Event as EngineEvent
from app.engine import RestoreOutcome as EngineRestore
from app.engine.chat_template import ReasoningOptions
from app.engine.context_policy import ContextFullPolicy
from app.engine.settings import ModelSettings
from app.engine.tool_calls.request import ToolRequest
from app.session.types import ChatMessage, LoadedModel

if TYPE_CHECKING:
    from app.engine import Engine

T = TypeVar("T")

Progress = Callable[[float], bool]
"""A load's progress (0..1); returning False cancels the load."""


class Capability(enum.Flag):
    """What an engine can do beyond running turns (see the module docstring)."""

    NONE = 0
    TOKENS = enum.auto()  # prompts of token ids or raw text, appended text, cache contents
    FORK_CACHE = enum.auto()  # a fork takes over the source's cache (else: re-send the text)
    STATE_FILES = enum.auto()  # a conversation's cache is saved and restored as bytes/files
    LOCAL_CALLS = enum.auto()  # ``Session.call`` runs a function on the in-process Engine
    ALL = TOKENS | FORK_CACHE | STATE_FILES | LOCAL_CALLS


# ---------------------------------------------------------------- prompts of a turn


@dataclass(frozen=True)
class ChatPrompt:
    """A chat turn: the history it answers (rendered by the model's template)."""

    messages: tuple[ChatMessage, ...]
    system: str = ""
    reasoning: ReasoningOptions = field(default_factory=ReasoningOptions)
    # The functions the reply may call (rendered into the prompt; None: no tools). An
    # engine reports calls as ToolCallStarted / ToolCallArguments events and in the
    # Completion (tool_calls, finish reason "tool_calls").
    tools: ToolRequest | None = None


@dataclass(frozen=True)
class TextPrompt:
    """Plain text: the whole prompt, or with ``append`` what follows the cache (needs
    ``TOKENS``)."""

    text: str
    append: bool = False


@dataclass(frozen=True)
class TokenPrompt:
    """A prompt of token ids (needs ``TOKENS``)."""

    tokens: tuple[int, ...]


Prompt = ChatPrompt | TextPrompt | TokenPrompt


# ---------------------------------------------------------------- what comes back


@dataclass(frozen=True)
class SequenceView:
    """A conversation's sequence as the context meter shows it."""

    n_tokens: int
    n_ctx: int
    resident: bool
    busy: bool
    generating: bool
    n_reserved: int = 0
    n_dropped: int = 0


@dataclass(frozen=True)
class EngineMemory:
    model_bytes: int = 0
    kv_bytes: int = 0
    kv_tokens_held: int = 0
    n_ctx: int = 0


@dataclass(frozen=True)
class Restored:
    """What a restore did, and why when it did not (``reason``)."""

    outcome: EngineRestore
    reason: str | None = None


@dataclass(frozen=True)
class Forked:
    key: int  # the new sequence
    n_tokens: int  # of the source's cache it took over


@dataclass(frozen=True)
class Loaded:
    engine: ConversationEngine
    warning: str | None = None  # e.g. the settings did not suit: the defaults were used


# ---------------------------------------------------------------- the protocols


class ConversationEngine(Protocol):
    """One loaded model serving many conversations, each on a sequence ``key``."""

    @property
    def capabilities(self) -> Capability: ...

    @property
    def ready(self) -> bool:
        """Whether it can run turns (False once closed, or after a failed rebuild)."""
        ...

    @property
    def fingerprint(self) -> str:
        """The loaded model's identity (what state files are checked against)."""
        ...

    def describe(self) -> LoadedModel: ...

    def memory(self) -> EngineMemory: ...

    def set_default_policy(self, policy: ContextFullPolicy) -> None: ...

    def set_policy(self, key: int, policy: ContextFullPolicy | None) -> None: ...

    # conversations
    def open(self) -> int: ...

    def close(self, key: int) -> None: ...

    def cut(self, key: int) -> None:
        """Forget what the sequence's cache holds: its text is read again next turn."""
        ...

    def tokens(self, key: int) -> tuple[int, ...]: ...

    def holds_anything(self, key: int) -> bool:
        """Whether the sequence holds or has queued any token (else: nothing to save)."""
        ...

    def status(self, key: int) -> SequenceView: ...

    def is_busy(self, key: int) -> bool: ...

    def has_work(self) -> bool: ...

    # turns
    def start(self, key: int, prompt: Prompt, sampling: SamplingParams) -> int:
        """Queue the prompt and start the reply; returns how many prompt tokens it decodes
        (after what the cache holds). Raises LlamaDeskError on a prompt it cannot take."""
        ...

    def stop(self, key: int | None) -> None:
        """Stop one sequence's generation (None: all). Any thread."""
        ...

    def step(self) -> list[EngineEvent]: ...

    def take_events(self) -> list[EngineEvent]:
        """Events of work done outside a step (evictions by an open, a rebuild...)."""
        ...

    def fork(self, key: int, messages: tuple[ChatMessage, ...], system: str) -> Forked:
        """A new sequence holding the source's cache up to the end of ``messages``
        (``FORK_CACHE``)."""
        ...

    # states (STATE_FILES)
    def save(self, key: int) -> bytes: ...

    def parked_state(self, key: int) -> bytes | None:
        """An evicted sequence's state (None: nothing kept)."""
        ...

    def restore(self, key: int, data: bytes) -> Restored: ...

    def save_file(self, key: int, path: str) -> int: ...

    def restore_file(self, key: int, path: str) -> Restored: ...

    # the whole engine
    def reconfigure(self, settings: ContextSettings) -> None: ...

    def call(self, fn: Callable[[Engine], T]) -> T:
        """``fn(engine)`` on the in-process Engine (``LOCAL_CALLS``)."""
        ...

    def shutdown(self) -> None:
        """Free everything (its sequences are gone)."""
        ...


class EngineLoader(Protocol):
    """How the session gets a :class:`ConversationEngine` for a model."""

    def check(self, path: str) -> None:
        """Raise LlamaDeskError when ``path`` is no model to load (before the loaded model is
        given up for it)."""
        ...

    def load(
        self,
        path: str,
        settings: ContextSettings,
        progress: Progress,
        fallback: bool,
        *,
        model_settings: ModelSettings | None = None,
    ) -> Loaded:
        """Load the model and its context; settings the model refuses fall back to the
        defaults when ``fallback`` (the warning says so), else the load fails
        (LlamaDeskError). ``progress`` returning False cancels it."""
        ...


def capability_missing(capability: Capability) -> str:
    """The sentence a client gets when the engine lacks ``capability``."""
    what: dict[Capability, str] = {
        Capability.TOKENS: "prompts of tokens or raw text",
        Capability.FORK_CACHE: "forking a conversation's cache",
        Capability.STATE_FILES: "saving and restoring a conversation's cache",
        Capability.LOCAL_CALLS: "calls into an in-process engine",
    }
    return f"The loaded engine does not support {what.get(capability, str(capability.name))}."


__all__ = [
    "Capability",
    "ChatPrompt",
    "ConversationEngine",
    "EngineLoader",
    "EngineMemory",
    "Forked",
    "Loaded",
    "Progress",
    "Prompt",
    "Restored",
    "SequenceView",
    "TextPrompt",
    "TokenPrompt",
    "capability_missing",
]
