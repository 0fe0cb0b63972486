"""The reply's room in the server's context: ``max_tokens`` capped to what is left.

A conversation's ``max_tokens`` is sent as the user set it, but a long conversation on a
server with a small context leaves less room than that, and LlamaDesk's server (like vLLM)
refuses such a request with a 400 ("... Lower max_tokens.") where the local engine would
shorten the reply's reserve. Where the server says its context per conversation (``/props``
``default_generation_settings.n_ctx``) and counts tokens the way it reads prompts (llama-
server and LlamaDesk: ``/tokenize``, ``/apply-template``), :func:`fit` caps ``max_tokens`` to
``n_ctx`` minus the prompt's tokens, and when nothing is left says the local engine's
sentence for a full context instead of sending the turn.

Counting costs requests (the chat route's prompt is rendered by the server), so it is done
only when it could matter: every token of the rendered prompt stands for at least one byte
of its text, so :func:`upper_bound` (the messages' and tools' JSON, plus room for the
template's markers) is never below the count, and a turn whose bound plus ``max_tokens``
fits the context is sent as it is. Measured against ``llamadesk serve`` on 127.0.0.1 with
the tiny test model, ``/apply-template`` plus ``/tokenize`` of a 6,000-character chat took
a few milliseconds (tests/remote/test_reply_room.py prints it).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import httpx2

from app.engine.chat_template import ReasoningOptions
from app.engine.errors import context_full_message
from app.remote.completion import TOOL_TEMPLATE_FIELDS, Renderer, post_json, render
from app.remote.connection import RemoteConnection
from app.remote.faults import FaultKind, RemoteError, RemoteFault

# Bytes allowed per message for the template's own text (role markers, separators) and
# once for what it adds around them (a default system prompt, the generation prompt).
MARKERS_PER_MESSAGE = 32
MARKERS_ONCE = 256


class ContextFull(RemoteError):
    """No room is left for a reply: the turn is not sent (its fault has the sentence)."""


@dataclass(frozen=True)
class ContextRoom:
    """What a turn needs to fit its reply into the server's context."""

    n_ctx: int  # the server's context per conversation
    max_tokens: int  # what the turn asks for (> 0)
    renderer: Renderer  # the prompt's text, as the server's template makes it
    reasoning: ReasoningOptions


def upper_bound(body: dict[str, Any]) -> int:
    """At least the prompt's tokens for the chat completion ``body`` (see the module)."""
    messages = body.get("messages", [])
    size = sum(len(json.dumps(m, ensure_ascii=False).encode("utf-8")) for m in messages)
    if body.get("tools"):
        size += len(json.dumps(body["tools"], ensure_ascii=False).encode("utf-8"))
    return size + MARKERS_PER_MESSAGE * len(messages) + MARKERS_ONCE


def count_tokens(client: httpx2.Client, conn: RemoteConnection, text: str) -> int:
    """The tokens the server reads ``text`` as: special tokens parsed, the BOS added (a
    template that writes its BOS too counts one more, which only errs on the safe side)."""
    data = post_json(
        client, conn, "/tokenize", {"content": text, "add_special": True, "parse_special": True}
    )
    tokens = data.get("tokens") if isinstance(data, dict) else None
    if not isinstance(tokens, list):
        raise RemoteError(
            RemoteFault(FaultKind.MALFORMED, f"{conn.label} answered /tokenize oddly.")
        )
    return len(tokens)


def fit(
    client: httpx2.Client,
    conn: RemoteConnection,
    room: ContextRoom,
    body: dict[str, Any],
    text: str | None = None,
) -> int:
    """The ``max_tokens`` to send for the chat completion ``body`` (``text``: its prompt's
    text where the turn rendered it already): the turn's own where it fits, else the room
    left. Raises :class:`ContextFull` with the full-context sentence when none is, and
    :class:`RemoteError` when counting failed."""
    max_tokens = room.max_tokens
    bound = upper_bound(body)
    if text is not None:
        bound = min(bound, len(text.encode("utf-8")) + 1)  # +1: the BOS the server adds
    if bound + max_tokens <= room.n_ctx:
        return max_tokens  # fits whatever the exact count: no request
    if text is None:
        text = (
            render(client, conn, body, TOOL_TEMPLATE_FIELDS)  # the server writes the tools in
            if body.get("tools")
            else room.renderer.render(client, conn, body, room.reasoning)
        )
    n_prompt = count_tokens(client, conn, text)
    left = room.n_ctx - n_prompt
    if left <= 0:
        raise ContextFull(
            RemoteFault(FaultKind.BAD_REQUEST, context_full_message(n_prompt, room.n_ctx, 0))
        )
    return min(max_tokens, left)
