"""What a message widget shows (:class:`MessageData`) and the texts made from it: the
role names, the reasoning block's title and the figures line under a message."""

from __future__ import annotations

from dataclasses import dataclass

from app.ui.wording import plural

ROLE_NAMES = {"user": "You", "assistant": "Assistant", "system": "System", "tool": "Tool"}
# How a reply ended (``MessageData.finish``, a FinishReason value), for the figures line;
# "aborted" and "error" are said by the status already.
FINISH_TEXT = {
    "eog": "end of reply",
    "length": "max tokens reached",
    "stop": "stop string",
    "context_full": "context full",
}


@dataclass
class MessageData:
    """What one message widget shows (built from a storage Message)."""

    id: int
    role: str
    content: str
    status: str = "complete"
    token_count: int | None = None
    prompt_tokens: int | None = None
    tokens_per_second: float | None = None
    sibling_index: int = 1
    sibling_count: int = 1
    error: str | None = None
    cached_tokens: int | None = None
    reasoning: str = ""  # a reasoning model's thinking before the answer ("": none)
    reasoning_ms: float | None = None  # how long it thought (None: unknown / still thinking)
    finish: str | None = None  # how the reply ended: a FinishReason value (None: unknown)
    ttft_ms: float | None = None  # time to the first token: prompt processing + first step
    imported_from: str | None = None  # the file the chat was imported from (its first message)


# A message's meta key: the name of the file its chat was imported from (set on import by
# app.ui.export_import; the chat's first message says it).
IMPORTED_FROM = "imported_from"


def thought_title(reasoning_ms: float | None) -> str:
    """The reasoning block's header once the thinking is over."""
    if reasoning_ms is None:
        return "Thoughts"
    if reasoning_ms < 1000:
        return "Thought for a moment"
    seconds = round(reasoning_ms / 1000)
    if seconds < 60:
        return f"Thought for {seconds} s"
    minutes, seconds = divmod(seconds, 60)
    return f"Thought for {minutes} min {seconds} s" if seconds else f"Thought for {minutes} min"


def _duration(ms: float) -> str:
    return f"{ms:.0f} ms" if ms < 1000 else f"{ms / 1000:.1f} s"


def figures_text(data: MessageData, streaming: bool = False) -> str:
    parts: list[str] = []
    if data.token_count:
        parts.append(plural(data.token_count, "token"))
    if data.tokens_per_second:
        parts.append(f"{data.tokens_per_second:.1f} tok/s")
    if data.ttft_ms is not None and not streaming:
        parts.append(f"first token {_duration(data.ttft_ms)}")
    if data.prompt_tokens:
        prompt = f"prompt {plural(data.prompt_tokens, 'token')}"
        if data.cached_tokens is not None:
            prompt += f" ({data.cached_tokens:,} cached)"
        parts.append(prompt)
    if data.imported_from:
        parts.append(f"imported from {data.imported_from}")
    if data.status == "stopped":
        parts.append("stopped")
    elif data.status == "partial" and not streaming:
        parts.append("interrupted")
    elif data.status == "error":
        # text that came before the failure is kept: the reply was broken off
        parts.append("cut off" if data.content else "error")
    elif not streaming and data.finish in FINISH_TEXT:
        parts.append(FINISH_TEXT[data.finish])
    return " · ".join(parts)
