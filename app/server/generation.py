"""``/v1/chat/completions`` and ``/v1/completions``: a request's turn in a session conversation.

The prompt is rendered and tokenized on the request's thread (:mod:`app.server.prompts`)
and refused there when it cannot fit, before the session sees it; the session thread then
only runs the turn (and, for a chat, renders the prompt that now fits once more).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from app.engine.reasoning import Channel
from app.engine.tokenizer import TextTooLongError
from app.server.admission import Admission
from app.server.errors import ApiError, bad_request, server_error
from app.server.params import ChatRequest, CompletionRequest, GenerationRequest
from app.server.pool import ApiConversation, ConversationPool
from app.server.prompts import RequestVocab
from app.server.reply_items import (
    ClientGone,
    Done,
    Failed,
    Gone,
    Item,
    Piece,
    RequestRecord,
    ToolDelta,
    cached_tokens,
    finish_reason,
)
from app.server.served_model import ServedModel
from app.server.store import ConversationStore
from app.session import ChatMessage, FinishReason, LoadedModel, TurnResult
from app.session import events as ev

_logger = logging.getLogger(__name__)

STOP_WAIT_S = 10.0
# How long a finished reply waits for its row to be committed before the client is told it
# finished anyway (a database another process holds locked; SQLite's own busy wait is 5 s).
STORE_WAIT_S = 30.0


class Generation:
    # False: a front for a remote engine (``serve --remote``): chat prompts are not
    # tokenized here; the remote server counts and checks them.
    local_tokens = True

    def __init__(
        self,
        served: ServedModel,
        vocab: RequestVocab,
        admission: Admission,
        pool: ConversationPool,
        store: ConversationStore | None,
        log: Callable[[RequestRecord], None],
    ) -> None:
        self._served = served
        self._session = served.session
        self._vocab = vocab
        self._admission = admission
        self._pool = pool
        self._store = store
        self._log = log

    def generate(
        self, req: GenerationRequest, gone: Gone, client: str = "", endpoint: str = ""
    ) -> Iterator[Item]:
        """The reply to ``req``: its pieces then :class:`Done` (or :class:`Failed` after
        the first piece). Errors before anything was generated are raised (ApiError).
        Closing the iterator early (a client gone) stops the turn and waits for its end."""
        t0 = time.monotonic()
        outcome: dict[str, Any] = {"status": 200}
        try:
            yield from self._generate(req, gone, outcome)
        except ApiError as exc:
            outcome.update(status=exc.status, error=exc.message)
            raise
        except (ClientGone, GeneratorExit):
            outcome["status"] = 499
            raise
        except Exception as exc:
            outcome.update(status=500, error=str(exc))
            raise
        finally:
            result: TurnResult | None = outcome.get("result")
            self._log(
                RequestRecord(
                    at=time.time(),
                    client=client,
                    endpoint=endpoint,
                    conversation=req.conversation,
                    status=outcome["status"],
                    prompt_tokens=result.n_prompt if result else 0,
                    cached_tokens=cached_tokens(result) if result else 0,
                    completion_tokens=result.n_tokens if result else 0,
                    tokens_per_second=result.tokens_per_second if result else 0.0,
                    seconds=time.monotonic() - t0,
                    finish_reason=finish_reason(result.finish_reason) if result else None,
                    error=outcome.get("error"),
                )
            )

    def prompt_tokens(self, req: GenerationRequest, n_ctx: int) -> tuple[int, ...]:
        """The request's prompt tokens, made on this thread; a 400 when they cannot leave
        room for one generated token, found before tokenizing all of a long prompt."""
        param = "messages" if isinstance(req, ChatRequest) else "prompt"
        if isinstance(req, ChatRequest) and not self.local_tokens:
            return ()
        if isinstance(req, CompletionRequest) and req.prompt_tokens is not None:
            tokens = self._vocab.checked_tokens(list(req.prompt_tokens), "prompt")
        else:
            if isinstance(req, ChatRequest):
                text = self._vocab.render_chat(req)
            else:
                assert isinstance(req, CompletionRequest)
                text = req.prompt or ""
            try:
                tokens = self._vocab.tokenize(text, n_ctx - 1, add_special=True, parse_special=True)
            except TextTooLongError as exc:
                raise ApiError(
                    400,
                    f"The prompt has at least {exc.at_least:,} tokens; this server's context "
                    f"holds {n_ctx:,} per request. Shorten the prompt.",
                    param=param,
                    code="context_length_exceeded",
                ) from None
        if len(tokens) >= n_ctx:
            raise ApiError(
                400,
                f"The prompt has {len(tokens):,} tokens; this server's context holds {n_ctx:,} "
                "per request. Shorten the prompt.",
                param=param,
                code="context_length_exceeded",
            )
        return tuple(tokens)

    def _generate(
        self, req: GenerationRequest, gone: Gone, outcome: dict[str, Any]
    ) -> Iterator[Item]:
        model = self._served.get()
        self._admission.enter(gone)
        conv: ApiConversation | None = None
        finished = False
        tokens: tuple[int, ...] | None = None
        try:
            n_ctx = model.n_ctx_seq
            tokens = self.prompt_tokens(req, n_ctx)
            # A max_tokens past the room left is not refused (many clients send a large
            # default): as in llama-server, the reply runs until the context is full and
            # ends with "length" (the conversation's STOP policy). Only a prompt that
            # leaves no room is refused, above.
            conv, _ = self._pool.acquire(req.conversation, tokens)
            events: queue.SimpleQueue[ev.ConversationEvent] = queue.SimpleQueue()
            conv.sink = events.put
            if isinstance(req, ChatRequest):
                turn = self._session.submit(
                    conv.cid, req.messages, req.system, req.sampling, req.reasoning, tools=req.tools
                )
            else:
                turn = self._session.submit_tokens(conv.cid, tokens, req.sampling)
            started = False
            deadline = time.monotonic() + self._served.config.turn_timeout_s
            answer: list[str] = []
            reasoning: list[str] = []
            while True:
                try:
                    event = events.get(timeout=0.02)
                except queue.Empty:
                    if gone():
                        raise ClientGone from None
                    if time.monotonic() > deadline:
                        raise server_error("The reply took too long and was stopped.") from None
                    continue
                if getattr(event, "turn_id", turn) != turn:
                    continue
                if isinstance(event, ev.TurnStarted):
                    started = True
                elif isinstance(event, ev.TextStreamed):
                    (answer if event.channel is Channel.ANSWER else reasoning).append(event.text)
                    yield Piece(event.text, event.channel)
                    if gone():
                        raise ClientGone
                elif isinstance(event, ev.ToolCallStreamed):
                    yield ToolDelta(event.index, event.call_id, event.name, event.fragment)
                    if gone():
                        raise ClientGone
                elif isinstance(event, ev.TurnFinished):
                    finished = True
                    result = event.result
                    outcome["result"] = result
                    conv.last_finish = result.finish_reason.value
                    if result.finish_reason is FinishReason.ERROR:
                        message = result.error or "The reply failed."
                        if not started:
                            tokens = None
                            raise bad_request(message)
                        yield Failed(server_error(message))
                        return
                    if result.finish_reason is FinishReason.ABORTED:
                        if result.error and not gone():
                            # cut off by the engine (a remote worker gone mid-reply), not by
                            # the client: the stream ends with an error event, then [DONE]
                            yield Failed(server_error(result.error))
                            return
                        raise ClientGone
                    # Committed before the client hears it finished (issue 27): a kill
                    # right after a whole reply must not lose it.
                    self._record(conv, req, model, result, "".join(answer), "".join(reasoning))
                    yield Done(result, conv.name)
                    return
        finally:
            if conv is not None:
                if not finished:
                    self._stop_and_wait(conv)
                self._pool.release(conv, tokens)
            self._admission.leave()

    def _stop_and_wait(self, conv: ApiConversation) -> None:
        """Stop the conversation's turn (a client gone) and wait for its end (one step)."""
        done = threading.Event()

        def sink(event: ev.ConversationEvent) -> None:
            if isinstance(event, ev.TurnFinished):
                done.set()

        conv.sink = sink
        self._session.stop(conv.cid)
        snapshot = self._session.inspect(conv.cid)
        try:
            busy = snapshot.result(STOP_WAIT_S).busy
        except Exception:
            busy = True
        if busy:
            done.wait(STOP_WAIT_S)
        conv.last_finish = FinishReason.ABORTED.value

    def _record(
        self,
        conv: ApiConversation,
        req: GenerationRequest,
        model: LoadedModel,
        result: TurnResult,
        answer: str,
        reasoning: str,
    ) -> None:
        """Store the turn and wait for the commit (the store's thread writes it)."""
        if conv.name is None or self._store is None or not isinstance(req, ChatRequest):
            return
        reply = ChatMessage("assistant", answer, reasoning, tool_calls=result.tool_calls)
        stored = self._store.record(
            conv.cid,
            req.system,
            req.messages,
            reply,
            model.path,
            result.n_tokens,
            result.tokens_per_second,
            result=result,  # the reply's ReplyMeta, as a window's reply gets
            engine=model.engine,
        )
        try:
            stored.result(STORE_WAIT_S)
        except Exception as exc:  # the client still gets the reply it was sent
            _logger.warning("the reply to API conversation %s was not stored: %r", conv.name, exc)
