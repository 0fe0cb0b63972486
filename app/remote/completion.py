"""llama-server's token route: the prompt on ``/completion`` as the last turn's pieces
and tokens, the reply's tokens kept for the next turn.

Re-sending a chat as text makes the server tokenize the last reply again, and text does
not always tokenize back to the tokens that were sampled (a model may spell a word in
other pieces than the tokenizer would; bytes that are no UTF-8 come back as U+FFFD): the
cache then matches only up to the reply, and the reply is read again. On llama-server
(``/apply-template``) a turn therefore:

1. renders the history with the server's template (:class:`Renderer`): here, with the
   template ``/props`` gave, once that rendering matched the server's own
   (``/apply-template``, the same body as a chat completion) for this kind of turn; until
   then, and wherever they differ, the server's;
2. when that text begins with what the last turn sent and got (:class:`Held`: its
   prompt's parts and its reply's tokens), sends those parts followed by the new text, a
   *mixed* prompt (``[text, id, id, ..., text]``: llama-server tokenizes each piece of
   text by itself, so the same parts give the same tokens every turn); else the text;
3. streams ``/completion`` with ``return_tokens``, so the reply's tokens come back.

The reply's tokens are kept only when they are all there and stand for the text: a reply
ended by a stop string (its tokens are sent, its text is not) or with a token missing
from the stream (llama-server holds back a token that ends inside a UTF-8 character)
keeps only the prompt's parts, and its text goes in the next turn's new text, as on the
chat route. Nothing is tokenized here; once the local rendering is trusted a turn is one
request, as on the chat route.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import httpx2

from app.engine import ChatTemplate, ChatTemplateError, SamplingParams
from app.engine.chat_template import ReasoningOptions
from app.remote.connection import RemoteConnection
from app.remote.faults import FaultKind, RemoteError, RemoteFault, status_fault, transport_fault
from app.remote.probe import probe_timeout

ROUTE = "/completion"
# the body fields of a chat completion that /apply-template reads (the rest is sampling)
TEMPLATE_FIELDS = ("messages", "chat_template_kwargs", "reasoning_effort")
# and what a turn with tools adds to them (its prompt holds their definitions)
TOOL_TEMPLATE_FIELDS = (*TEMPLATE_FIELDS, "tools", "tool_choice", "parallel_tool_calls")
STOP_REASONS = {"eos": "stop", "word": "stop", "limit": "length"}

log = logging.getLogger(__name__)


Part = str | int  # a piece of text (tokenized by the server) or a token id


@dataclass(frozen=True)
class Held:
    """What the last turn sent and got, as the server's cache holds it: the text it
    stands for and its parts (pieces of text and the reply's token ids)."""

    text: str
    parts: tuple[Part, ...]


@dataclass(frozen=True)
class Prepared:
    body: dict[str, Any]
    prompt_text: str
    parts: tuple[Part, ...]  # the prompt as sent
    reused: int  # parts taken over from the last turn (0: the text alone)


def prompt_of(parts: tuple[Part, ...]) -> str | list[Part]:
    """The ``prompt`` field: a mixed list where it holds a token id (a list of texts
    alone would be several prompts), else the text."""
    if any(isinstance(p, int) for p in parts):
        return list(parts)
    return "".join(str(p) for p in parts)


def post_json(client: httpx2.Client, conn: RemoteConnection, route: str, body: Any) -> Any:
    try:
        response = client.post(conn.root + route, json=body, timeout=probe_timeout(conn))
    except httpx2.HTTPError as exc:
        raise RemoteError(transport_fault(conn.label, exc, streaming=False)) from None
    if response.status_code != 200:
        raise RemoteError(
            status_fault(conn.label, response.status_code, response.text, response.headers)
        )
    try:
        return response.json()
    except ValueError:
        raise RemoteError(
            RemoteFault(FaultKind.MALFORMED, f"{conn.label} answered {route} with no JSON.")
        ) from None


def render(
    client: httpx2.Client,
    conn: RemoteConnection,
    chat: dict[str, Any],
    fields: tuple[str, ...] = TEMPLATE_FIELDS,
) -> str:
    """The prompt text the server's template makes of the chat completion body ``chat``."""
    data = post_json(client, conn, "/apply-template", {k: chat[k] for k in fields if k in chat})
    prompt = data.get("prompt") if isinstance(data, dict) else None
    if not isinstance(prompt, str):
        raise RemoteError(
            RemoteFault(FaultKind.MALFORMED, f"{conn.label} answered /apply-template oddly.")
        )
    return prompt


class Renderer:
    """A turn's prompt text: rendered here with the server's template (``/props``) once
    that matched the server's own rendering for this kind of turn (the reasoning options,
    whether replies and their reasoning are in the history), else by the server.
    Thread-safe (the turns of several conversations render at once)."""

    def __init__(self, template: str | None, bos_token: str, eos_token: str) -> None:
        self._template: ChatTemplate | None = None
        if template:
            try:
                self._template = ChatTemplate(template, bos_token, eos_token)
            except ChatTemplateError as exc:
                log.info("the server's template does not render here: %s", exc)
        self._trusted: dict[tuple[Any, ...], bool] = {}
        self._lock = threading.Lock()
        self.local_renders = 0  # turns rendered here (diagnostics, tests)

    @staticmethod
    def _kind(chat: dict[str, Any], reasoning: ReasoningOptions) -> tuple[Any, ...]:
        messages = chat.get("messages", [])
        return (
            reasoning.enable_thinking,
            reasoning.effort,
            any(m.get("role") == "assistant" for m in messages),
            any("reasoning_content" in m for m in messages),
            any(m.get("role") == "system" for m in messages),
        )

    def render(
        self,
        client: httpx2.Client,
        conn: RemoteConnection,
        chat: dict[str, Any],
        reasoning: ReasoningOptions,
    ) -> str:
        kind = self._kind(chat, reasoning)
        with self._lock:
            trusted = self._trusted.get(kind)
        local: str | None = None
        if self._template is not None and trusted is not False:
            try:
                local = self._template.render(
                    chat["messages"], True, strip_bos=False, reasoning=reasoning
                )
            except ChatTemplateError:
                local = None
        if local is not None and trusted:
            with self._lock:
                self.local_renders += 1
            return local
        text = render(client, conn, chat)
        if local is not None:
            with self._lock:
                self._trusted[kind] = local == text
        return text


def prepare(
    chat: dict[str, Any],
    sampling: SamplingParams,
    held: Sequence[Held],
    text: str,
) -> Prepared:
    """The ``/completion`` body for the chat completion body ``chat`` whose prompt text is
    ``text``, sent as the longest of ``held`` that it begins with (a regenerate begins with
    the last prompt, an edit with an earlier one), then the new text."""
    parts: tuple[Part, ...]
    best = max(
        (h for h in held if h.parts and text.startswith(h.text)),
        key=lambda h: len(h.text),
        default=None,
    )
    if best is not None:
        new = text[len(best.text) :]
        parts, reused = best.parts + ((new,) if new else ()), len(best.parts)
    else:
        parts, reused = (text,), 0
    if not any(isinstance(p, int) for p in parts):
        parts = (text,)  # sent as one text (tokenized as one): kept as it was sent
    body: dict[str, Any] = {
        "prompt": prompt_of(parts),
        "stream": True,
        "return_tokens": True,
        "return_progress": True,
        "cache_prompt": True,
        "n_predict": sampling.max_tokens if sampling.max_tokens > 0 else -1,
    }
    for name in (
        "id_slot",
        "temperature",
        "top_p",
        "top_k",
        "min_p",
        "repeat_penalty",
        "repeat_last_n",
        "frequency_penalty",
        "presence_penalty",
        "seed",
        "stop",
        "grammar",
    ):
        if name in chat:
            body[name] = chat[name]
    return Prepared(body, text, parts, reused)


@dataclass(frozen=True)
class Piece:
    """One streamed ``/completion`` chunk, taken apart."""

    content: str = ""
    tokens: tuple[int, ...] = ()
    stop_type: str | None = None  # on the last chunk: eos | word | limit
    n_predicted: int | None = None


def read_piece(data: dict[str, Any]) -> Piece:
    """The text and tokens of a chunk (a prompt-progress chunk carries neither)."""
    if isinstance(data.get("prompt_progress"), dict):
        return Piece()
    content = data.get("content")
    raw = data.get("tokens")
    tokens = (
        tuple(t for t in raw if isinstance(t, int) and not isinstance(t, bool))
        if isinstance(raw, list)
        else ()
    )
    n = data.get("tokens_predicted")
    stop_type = data.get("stop_type") if data.get("stop") is True else None
    return Piece(
        content if isinstance(content, str) else "",
        tokens,
        stop_type if isinstance(stop_type, str) else ("eos" if data.get("stop") is True else None),
        n if isinstance(n, int) and not isinstance(n, bool) else None,
    )


def finish_of(stop_type: str | None) -> str | None:
    """The OpenAI finish reason of a ``stop_type``."""
    return STOP_REASONS.get(stop_type or "", "stop") if stop_type is not None else None


def held_after(
    prepared: Prepared, reply: str, tokens: list[int], stop_type: str | None, n: int | None
) -> tuple[Held, ...]:
    """What a later turn may send again: the prompt's parts, and with the reply's tokens
    where they stand for its text (see the module docstring)."""
    prompt = Held(prepared.prompt_text, prepared.parts)
    if stop_type not in ("eos", "limit") or n is None or len(tokens) != n:
        return (prompt,)
    kept = tokens[:-1] if stop_type == "eos" else tokens  # the end token: the template's
    return (prompt, Held(prepared.prompt_text + reply, prepared.parts + tuple(kept)))
