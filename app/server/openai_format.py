"""OpenAI response objects and stream chunks from the service's items."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

from app.engine.reasoning import Channel
from app.server.reply_items import (
    Done,
    Failed,
    Item,
    Piece,
    ToolDelta,
    cached_tokens,
    finish_reason,
)
from app.session import TurnResult


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:24]}"


def usage(result: TurnResult) -> dict[str, Any]:
    return {
        "prompt_tokens": result.n_prompt,
        "completion_tokens": result.n_tokens,
        "total_tokens": result.n_prompt + result.n_tokens,
        "prompt_tokens_details": {"cached_tokens": cached_tokens(result)},
    }


def timings(result: TurnResult) -> dict[str, Any]:
    """llama-server's ``timings`` object."""
    return {
        "cache_n": cached_tokens(result),
        "prompt_n": result.n_prompt_processed,
        "prompt_ms": round(result.prompt_ms, 3),
        "predicted_n": result.n_tokens,
        "predicted_ms": round(result.gen_ms, 3),
        "predicted_per_second": round(result.tokens_per_second, 3),
        # speculative decoding, as llama-server names them
        "draft_n": result.n_drafted,
        "draft_n_accepted": result.n_accepted,
    }


def tool_call_delta(item: ToolDelta) -> dict[str, Any]:
    """A ``delta.tool_calls`` entry: the call's index, id, type and name first (with empty
    arguments), then fragments of its arguments."""
    if item.name:
        return {
            "index": item.index,
            "id": item.call_id,
            "type": "function",
            "function": {"name": item.name, "arguments": ""},
        }
    return {"index": item.index, "function": {"arguments": item.fragment}}


def chat_response(items: Iterator[Item], model: str) -> dict[str, Any]:
    answer: list[str] = []
    reasoning: list[str] = []
    done: Done | None = None
    for item in items:
        if isinstance(item, Piece):
            (answer if item.channel is Channel.ANSWER else reasoning).append(item.text)
        elif isinstance(item, Failed):
            raise item.error
        elif isinstance(item, Done):
            done = item
    assert done is not None
    calls = done.result.tool_calls
    text = "".join(answer)
    # OpenAI's shape: content null when the reply is only calls.
    message: dict[str, Any] = {"role": "assistant", "content": text if text or not calls else None}
    if reasoning:
        message["reasoning_content"] = "".join(reasoning)
    if calls:
        message["tool_calls"] = [call.to_openai() for call in calls]
    out: dict[str, Any] = {
        "id": new_id("chatcmpl"),
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": finish_reason(done.result.finish_reason),
            }
        ],
        "usage": usage(done.result),
        "timings": timings(done.result),
    }
    if done.conversation is not None:
        out["conversation"] = done.conversation
    return out


def chat_chunks(items: Iterator[Item], model: str, include_usage: bool) -> Iterator[dict[str, Any]]:
    cid = new_id("chatcmpl")
    created = int(time.time())

    def chunk(delta: dict[str, Any], reason: str | None = None) -> dict[str, Any]:
        return {
            "id": cid,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": reason}],
        }

    # llama-server (and the non-streamed reply without text) have null here, not "".
    yield chunk({"role": "assistant", "content": None})
    for item in items:
        if isinstance(item, Piece):
            key = "content" if item.channel is Channel.ANSWER else "reasoning_content"
            yield chunk({key: item.text})
        elif isinstance(item, ToolDelta):
            yield chunk({"tool_calls": [tool_call_delta(item)]})
        elif isinstance(item, Failed):
            yield item.error.body()
            return
        else:
            final = chunk({}, finish_reason(item.result.finish_reason))
            final["timings"] = timings(item.result)
            yield final
            if include_usage:
                yield {
                    "id": cid,
                    "object": "chat.completion.chunk",
                    "created": created,
                    "model": model,
                    "choices": [],
                    "usage": usage(item.result),
                }


def completion_response(items: Iterator[Item], model: str) -> dict[str, Any]:
    text: list[str] = []
    done: Done | None = None
    for item in items:
        if isinstance(item, Piece):
            if item.channel is Channel.ANSWER:
                text.append(item.text)
        elif isinstance(item, Failed):
            raise item.error
        elif isinstance(item, Done):
            done = item
    assert done is not None
    return {
        "id": new_id("cmpl"),
        "object": "text_completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "text": "".join(text),
                "logprobs": None,
                "finish_reason": finish_reason(done.result.finish_reason),
            }
        ],
        "usage": usage(done.result),
        "timings": timings(done.result),
    }


def completion_chunks(
    items: Iterator[Item], model: str, include_usage: bool
) -> Iterator[dict[str, Any]]:
    cid = new_id("cmpl")
    created = int(time.time())

    def chunk(text: str, reason: str | None = None) -> dict[str, Any]:
        return {
            "id": cid,
            "object": "text_completion",
            "created": created,
            "model": model,
            "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": reason}],
        }

    for item in items:
        if isinstance(item, Piece):
            if item.channel is Channel.ANSWER:
                yield chunk(item.text)
        elif isinstance(item, Failed):
            yield item.error.body()
            return
        elif isinstance(item, Done):
            final = chunk("", finish_reason(item.result.finish_reason))
            final["timings"] = timings(item.result)
            yield final
            if include_usage:
                yield {
                    "id": cid,
                    "object": "text_completion",
                    "created": created,
                    "model": model,
                    "choices": [],
                    "usage": usage(item.result),
                }
