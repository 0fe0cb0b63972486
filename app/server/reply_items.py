"""What a generation hands the transport (pieces, then its end) and what it logs."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from app.engine.reasoning import Channel
from app.server.errors import ApiError
from app.session import FinishReason, TurnResult

# Asked on a request thread: has the client closed its connection?
Gone = Callable[[], bool]


class ClientGone(Exception):
    """The client closed its connection."""


@dataclass(frozen=True)
class Piece:
    text: str
    channel: Channel


@dataclass(frozen=True)
class ToolDelta:
    """A tool call in the reply: the first of an ``index`` has its id and name, the next
    ones a fragment of its arguments (only appended)."""

    index: int
    call_id: str = ""
    name: str = ""
    fragment: str = ""


@dataclass(frozen=True)
class Done:
    result: TurnResult
    conversation: str | None


@dataclass(frozen=True)
class Failed:
    error: ApiError


Item = Piece | ToolDelta | Done | Failed


@dataclass(frozen=True)
class RequestRecord:
    """One generation request, for a live request log (``ApiService.subscribe_log``)."""

    at: float  # time.time() at the end
    client: str
    endpoint: str
    conversation: str | None
    status: int  # HTTP status; 499: the client went away
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    tokens_per_second: float = 0.0
    seconds: float = 0.0
    finish_reason: str | None = None
    error: str | None = None


def finish_reason(reason: FinishReason) -> str:
    """OpenAI's ``finish_reason`` for a turn's end."""
    if reason in (FinishReason.LENGTH, FinishReason.CONTEXT_FULL):
        return "length"
    if reason is FinishReason.TOOL_CALLS:
        return "tool_calls"
    return "stop"


def cached_tokens(result: TurnResult) -> int:
    """Prompt tokens the cache already held (usage, timings and the request log): the
    result's own figure (one definition, :func:`app.engine.prefix.cached_tokens`)."""
    return result.cached_tokens
