"""The one writer of a conversation's messages: every client's user messages and replies.

:class:`ReplyMeta` is what a finished reply carries (model, engine, tokens, cached tokens,
timings, reasoning, finish reason, the error); :class:`Recorder` writes messages in one
shape whoever asked: the session's own turns (``Session.answer``: the user message, the
reply begun before the turn starts, saved while it streams, finished with its metadata),
the API server's conversations (:meth:`Recorder.record_exchange`) and the window's replies.

A :class:`Recorder` wraps one :class:`~app.storage.Database` connection, so it is used on
the thread that opened it (SQLite connections belong to one thread): the session thread's
is cloned there from the database the session was given.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from app.errors import LlamaDeskError
from app.messages import TOOL_CALLS_KEY, TOOL_OUTCOME_KEY
from app.messages import history as history  # a stored thread as a turn's messages
from app.session.types import ChatMessage, FinishReason, MessageToolCall, TurnResult

if TYPE_CHECKING:  # storage is imported only by clients that keep a database
    from app.storage import Database, Message

log = logging.getLogger(__name__)

# "Stop the reply" when full: say why it stopped, and what would go on
CONTEXT_FULL_STOP = (
    "The context is full, so the reply stopped here. Start a new chat, fork from "
    "an earlier message, or set “When the context is full” to drop the oldest "
    "messages in Conversation settings."
)


@dataclass(frozen=True)
class ReplyMeta:
    """A finished reply's figures, as every client's replies are stored (its tool calls
    in the message's ``meta``, :data:`app.messages.TOOL_CALLS_KEY`)."""

    model: str  # the model file's path ("" unknown)
    engine: str  # what ran it ("llama.cpp", a remote engine's name)
    finish_reason: FinishReason
    n_tokens: int = 0
    n_prompt: int = 0
    n_cached: int = 0  # prompt tokens taken from the cache
    prompt_ms: float = 0.0
    gen_ms: float = 0.0
    tokens_per_second: float = 0.0
    ttft_ms: float | None = None  # from the send to the first token (None: not measured)
    reasoning: str = ""
    reasoning_ms: float | None = None
    error: str | None = None
    tool_calls: tuple[MessageToolCall, ...] = ()
    tool_errors: tuple[str, ...] = ()

    @classmethod
    def of(
        cls,
        result: TurnResult,
        model: str,
        engine: str,
        *,
        ttft_ms: float | None = None,
        reasoning: str = "",
        reasoning_ms: float | None = None,
        error: str | None = None,
    ) -> ReplyMeta:
        """The figures of ``result``; ``reasoning``, ``reasoning_ms`` and ``error`` fill in
        what the result lacks (a client's own streamed copy)."""
        reasoning = result.reasoning or reasoning
        thought_ms = result.reasoning_ms if result.reasoning_ms is not None else reasoning_ms
        return cls(
            model=model,
            engine=engine,
            finish_reason=result.finish_reason,
            n_tokens=result.n_tokens,
            n_prompt=result.n_prompt,
            n_cached=result.cached_tokens,
            prompt_ms=result.prompt_ms,
            gen_ms=result.gen_ms,
            tokens_per_second=result.tokens_per_second,
            ttft_ms=ttft_ms,
            reasoning=reasoning,
            reasoning_ms=thought_ms if reasoning else None,
            error=result.error or error,
            tool_calls=result.tool_calls,
            tool_errors=result.tool_errors,
        )

    @property
    def status(self) -> str:
        """The stored status: "stopped" (the user stopped it), "error" or "complete" (a
        full context that stopped the reply is complete, with a notice). A reply broken
        off by a fault (a remote server that went away mid-reply: aborted, with the
        error) is an error with its text kept, not a user's stop."""
        reason = self.finish_reason
        if reason is FinishReason.ABORTED:
            return "error" if self.error else "stopped"
        if reason is FinishReason.ERROR or (self.error and reason is not FinishReason.CONTEXT_FULL):
            return "error"
        return "complete"

    @property
    def notice(self) -> str | None:
        """What is said about the reply: its error, or why a full context stopped it."""
        if self.error:
            return self.error
        if self.finish_reason is FinishReason.CONTEXT_FULL:
            return CONTEXT_FULL_STOP
        return None

    def storage_meta(self) -> dict[str, Any]:
        """The message's ``meta`` JSON (the keys the window reads back)."""
        meta: dict[str, Any] = {
            "finish_reason": self.finish_reason.value,
            "prompt_processed": self.n_prompt - self.n_cached,
            "prompt_ms": round(self.prompt_ms, 1),
            "gen_ms": round(self.gen_ms, 1),
            "engine": self.engine,
        }
        if self.ttft_ms is not None:
            meta["ttft_ms"] = round(self.ttft_ms, 1)
        notice = self.notice
        if notice:
            meta["error"] = notice
        if self.tool_calls:
            meta[TOOL_CALLS_KEY] = [c.to_stored() for c in self.tool_calls]
        if self.tool_errors:
            meta["tool_errors"] = list(self.tool_errors)
        return meta

    def figures(self) -> dict[str, Any]:
        """The keyword arguments of ``Database.finish_reply`` after the text and status."""
        return {
            "token_count": self.n_tokens or None,
            "prompt_tokens": self.n_prompt or None,
            "tokens_per_second": self.tokens_per_second or None,
            "meta": self.storage_meta(),
            "reasoning": self.reasoning or None,
            "reasoning_ms": self.reasoning_ms if self.reasoning else None,
        }


@dataclass(frozen=True)
class StoredFigures:
    """What a stored reply's ``meta`` says, read back with the keys
    :meth:`ReplyMeta.storage_meta` writes (here, beside them: the window reads no key)."""

    finish_reason: FinishReason | None = None  # None: not stored (an older or user message)
    prompt_processed: int | None = None  # prompt tokens decoded (not taken from the cache)
    ttft_ms: float | None = None
    error: str | None = None
    engine: str = ""

    @classmethod
    def of(cls, meta: Mapping[str, Any] | None) -> StoredFigures:
        meta = meta or {}
        finish = meta.get("finish_reason")
        processed = meta.get("prompt_processed")
        ttft = meta.get("ttft_ms")
        error = meta.get("error")
        engine = meta.get("engine")
        return cls(
            finish_reason=FinishReason.parse(finish)
            if isinstance(finish, str) and finish
            else None,
            prompt_processed=processed if isinstance(processed, int) else None,
            ttft_ms=float(ttft) if isinstance(ttft, (int, float)) else None,
            error=str(error) if error else None,
            engine=engine if isinstance(engine, str) else "",
        )


class Recorder:
    """See the module docstring."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def add_user(self, conversation_id: int, text: str, parent_id: int | None) -> Message:
        """The user's message (an edit is a sibling: the edited message's parent)."""
        return self.db.add_message(conversation_id, "user", text, parent_id=parent_id)

    def add_tool_result(
        self, conversation_id: int, result: ChatMessage, parent_id: int, outcome: str = ""
    ) -> Message:
        """A tool's result (``role`` "tool"), under the reply that called it; ``outcome``:
        how the call went, as the client says it (ok, denied, timeout...)."""
        meta = result.storage_meta()
        if outcome:
            meta[TOOL_OUTCOME_KEY] = outcome
        return self.db.add_message(
            conversation_id, "tool", result.content, parent_id=parent_id, meta=meta
        )

    def begin_reply(self, conversation_id: int, parent_id: int | None, model: str) -> Message:
        """The reply, empty and "partial", committed before its turn starts."""
        return self.db.begin_reply(conversation_id, parent_id, model_path=model or None)

    def save_partial(
        self, message_id: int, answer: str, reasoning: str | None, reasoning_ms: float | None
    ) -> None:
        """The text streamed so far (a later finish wins over a late partial)."""
        if reasoning is None:
            self.db.update_reply(message_id, answer)
        else:
            self.db.update_reply(message_id, answer, reasoning=reasoning, reasoning_ms=reasoning_ms)

    def finish_reply(self, message_id: int, text: str, meta: ReplyMeta) -> Message:
        return self.db.finish_reply(message_id, text, meta.status, **meta.figures())

    def drop_reply(self, message_id: int) -> None:
        """A failed reply with nothing written: an error is not an assistant message (the
        user's message stays, ready for a retry or an edit)."""
        self.db.delete_branch(message_id)

    def end_reply(self, message_id: int, text: str, meta: ReplyMeta) -> Message | None:
        """Finish the reply, or drop it when it failed before writing anything."""
        if meta.status == "error" and not text and not meta.reasoning:
            self.drop_reply(message_id)
            return None
        return self.finish_reply(message_id, text, meta)

    def delete_message(self, conversation_id: int, message_id: int) -> None:
        """One message of the conversation goes; its replies move up to its parent."""
        if self.db.get_message(message_id).conversation_id != conversation_id:
            raise LlamaDeskError(
                f"Message {message_id} is not part of conversation {conversation_id}; reload it."
            )
        self.db.delete_message(message_id)

    def record_exchange(
        self,
        conversation_id: int,
        system: str,
        messages: tuple[ChatMessage, ...],
        reply: str,
        meta: ReplyMeta,
    ) -> Message:
        """A whole turn a client sent at once (the API): the messages the stored thread
        lacks (a branch where they differ), then the finished reply with its figures."""
        db = self.db
        conv = db.get_conversation(conversation_id)
        if system != conv.system_prompt:
            db.update_conversation_settings(conversation_id, system_prompt=system)
        parent: int | None = None
        i = 0
        for stored, wanted in zip(db.get_thread(conversation_id), messages, strict=False):
            if not _same_message(stored.chat(), wanted):
                break
            parent = stored.id
            i += 1
        for message in messages[i:]:
            parent = db.add_message(
                conversation_id,
                message.role,
                message.content,
                parent_id=parent,
                reasoning=message.reasoning_content,
                meta=message.storage_meta() or None,
            ).id
        figures = meta.figures()
        return db.add_message(
            conversation_id,
            "assistant",
            reply,
            parent_id=parent,
            status=meta.status,
            model_path=meta.model or None,
            token_count=figures["token_count"],
            prompt_tokens=figures["prompt_tokens"],
            tokens_per_second=figures["tokens_per_second"],
            meta=figures["meta"],
            reasoning=meta.reasoning,
            reasoning_ms=figures["reasoning_ms"],
        )


def _same_message(stored: ChatMessage, wanted: ChatMessage) -> bool:
    """The stored message is the one a client sent (its reasoning aside: clients drop it)."""
    return replace(stored, reasoning_content="") == replace(wanted, reasoning_content="")


class SessionRecords:
    """The session thread's :class:`Recorder`: its connection is cloned on first use, on
    that thread, from the database the session was given (None: nothing is recorded)."""

    def __init__(self, database: Database | None) -> None:
        self._source = database
        self._recorder: Recorder | None = None
        self._failed = False

    @property
    def enabled(self) -> bool:
        return self._source is not None

    def recorder(self) -> Recorder | None:
        if self._recorder is None and self._source is not None and not self._failed:
            try:
                self._recorder = Recorder(self._source.clone())
            except LlamaDeskError as exc:
                self._failed = True
                log.warning("cannot record replies: %s", exc)
        return self._recorder

    def close(self) -> None:
        if self._recorder is not None:
            self._recorder.db.close()
            self._recorder = None
