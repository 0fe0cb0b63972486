"""Plain typed records returned by :class:`app.storage.Database` (times: float unix seconds)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from app.messages import ChatMessage, chat_message

Role = Literal["system", "user", "assistant", "tool"]
Status = Literal["complete", "partial", "error", "stopped"]
TitleSource = Literal["default", "auto", "user"]

ROLES: frozenset[str] = frozenset({"system", "user", "assistant", "tool"})
STATUSES: frozenset[str] = frozenset({"complete", "partial", "error", "stopped"})
TITLE_SOURCES: frozenset[str] = frozenset({"default", "auto", "user"})
DEFAULT_TITLE = "New chat"


@dataclass(frozen=True, slots=True)
class Conversation:
    """One chat. ``title_source`` is "default" until the first user message gives an
    automatic title ("auto"); a rename makes it "user" and the title then never changes by
    itself. ``current_leaf_id`` is the last message of the branch shown by default."""

    id: int
    title: str
    title_source: TitleSource
    created_at: float
    updated_at: float
    model_path: str | None
    system_prompt: str
    sampling: dict[str, Any]
    pinned: bool
    archived: bool
    current_leaf_id: int | None
    deleted_at: float | None = None
    message_count: int = 0


@dataclass(frozen=True, slots=True)
class Message:
    """One node of a conversation's message tree (``parent_id`` None for a root).

    ``status``: "complete", "partial" (still streaming, or interrupted by a crash when no
    generation is running), "error" or "stopped" (the user pressed Stop).

    ``reasoning``: a reasoning model's "thinking" before the answer (``content``), "" when
    there is none; ``reasoning_ms``: how long the thinking took in milliseconds (None:
    unknown, or no reasoning)."""

    id: int
    conversation_id: int
    parent_id: int | None
    role: Role
    content: str
    status: Status
    created_at: float
    updated_at: float
    token_count: int | None = None
    prompt_tokens: int | None = None
    tokens_per_second: float | None = None
    model_path: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    reasoning: str = ""
    reasoning_ms: float | None = None

    def chat(self) -> ChatMessage:
        """This message as a turn's message (the one shape that goes on to the engine)."""
        return chat_message(self)


@dataclass(frozen=True, slots=True)
class Tab:
    """An open tab: which conversation, where in the tab bar, which branch it shows."""

    conversation_id: int
    position: int
    leaf_id: int | None = None


@dataclass(frozen=True, slots=True)
class SearchHit:
    """A full-text search result; ``snippet`` has the matches between the markers given to
    :meth:`Database.search`; ``rank`` is bm25 (lower is better, results come best first)."""

    conversation_id: int
    message_id: int
    title: str
    role: Role
    snippet: str
    rank: float
    created_at: float


@dataclass(frozen=True, slots=True)
class ModelEntry:
    """A GGUF file of the model library; exactly one of ``metadata`` / ``error`` is set."""

    path: str
    size: int
    mtime_ns: int
    metadata: dict[str, Any] | None
    error: str | None
    last_used: float | None
    folder: str | None
    scanned_at: float

    @property
    def name(self) -> str:
        return self.path.replace("\\", "/").rsplit("/", 1)[-1]


@dataclass(frozen=True, slots=True)
class Preset:
    """Named load settings (the engine's context settings as a dict) for one model file."""

    model_path: str
    name: str
    settings: dict[str, Any]
    updated_at: float


@dataclass(slots=True)
class ScanResult:
    """What :meth:`Database.scan` did. ``errors`` maps a path to the reader's error text;
    files of a folder that is missing (e.g. an unplugged drive) are kept, not removed."""

    added: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: int = 0
    removed: list[str] = field(default_factory=list)
    errors: dict[str, str] = field(default_factory=dict)
    missing_folders: list[str] = field(default_factory=list)

    @property
    def metadata_reads(self) -> int:
        """How many files were passed to the metadata reader."""
        return len(self.added) + len(self.updated)
