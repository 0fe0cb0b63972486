"""The conversation as a template is given it: past reasoning under the names templates
read, and the repairs for templates that refuse a system message or repeated roles
(llama.cpp's ``workaround::system_message_not_supported`` in ``common/chat.cpp``)."""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any, Final

#: How llama.cpp joins a folded system message with the first user message.
_SYSTEM_JOIN: Final = "\n"


def merge_system(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """System messages folded into the next user message (``system + "\\n" + user``, the
    join of llama.cpp's ``system_message_not_supported``).

    System text with no user message after it becomes a user message of its own (llama.cpp
    drops it; keeping it loses nothing).
    """
    merged: list[dict[str, Any]] = []
    pending: list[str] = []
    for message in messages:
        role = message.get("role")
        if role == "system":
            pending.append(str(message.get("content") or ""))
        elif role == "user" and pending:
            content = _SYSTEM_JOIN.join([*pending, str(message.get("content") or "")])
            merged.append({**message, "content": content})
            pending = []
        else:
            merged.append(dict(message))
    if pending:
        merged.append({"role": "user", "content": _SYSTEM_JOIN.join(pending)})
    return merged


def merge_consecutive(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Consecutive messages of the same role joined with a blank line."""
    merged: list[dict[str, Any]] = []
    for message in messages:
        if merged and merged[-1].get("role") == message.get("role"):
            previous = merged[-1]
            content = f"{previous.get('content') or ''}\n\n{message.get('content') or ''}"
            merged[-1] = {**previous, "content": content}
        else:
            merged.append(dict(message))
    return merged


def has_consecutive_roles(messages: Sequence[Mapping[str, Any]]) -> bool:
    return any(a.get("role") == b.get("role") for a, b in itertools.pairwise(messages))


def prepare_messages(
    messages: Sequence[Mapping[str, Any]], as_thinking: bool, thinking_blocks: bool = False
) -> list[dict[str, Any]]:
    """Copies of ``messages`` with past reasoning where the template looks for it.

    Empty reasoning is left out (templates test ``is string`` or truthiness, and those
    that split ``content`` on ``</think>`` then see the bare answer); with ``as_thinking``
    (gpt-oss's harmony, LFM2/LFM2.5) it is also given as ``thinking``, as llama.cpp maps it;
    with ``thinking_blocks`` (Ministral 3) a reply's content becomes a ``thinking`` block
    and a ``text`` block, as llama-server's Ministral 3 handler builds it (a string content
    renders the same as one text block, so only replies with reasoning are changed).
    """
    prepared: list[dict[str, Any]] = []
    for message in messages:
        copy = dict(message)
        reasoning = copy.get("reasoning_content")
        if "reasoning_content" in copy and not (isinstance(reasoning, str) and reasoning):
            del copy["reasoning_content"]
        elif thinking_blocks and isinstance(reasoning, str) and copy.get("role") == "assistant":
            content = copy.get("content")
            blocks: list[Any] = [{"type": "thinking", "thinking": reasoning}]
            if isinstance(content, str):
                blocks.append({"type": "text", "text": content})
            elif isinstance(content, list):
                blocks.extend(content)
            copy["content"] = blocks
            del copy["reasoning_content"]
        elif as_thinking and isinstance(reasoning, str) and "thinking" not in copy:
            copy["thinking"] = reasoning
        prepared.append(copy)
    return prepared
