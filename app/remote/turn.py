"""One remote turn on a worker thread: the request, its stream, and the events it hands on.

A :class:`RemoteTurn` posts the chat completion and reads its server-sent events
(httpx2's :class:`~httpx2.EventSource`), handing :data:`TurnEvent` values to ``sink`` (the
engine's queue, read by its ``step`` on the session thread). It never blocks the session
thread, and it ends with exactly one :class:`Ended`.

:meth:`RemoteTurn.cancel` (any thread) closes the stream: the socket is shut down so
that a read waiting for the server returns at once (closing a socket does not wake a
thread blocked on it), which is how an OpenAI-compatible server learns that the client
gave up (llama-server then frees the slot). To know the socket also while the request
waits for the response's headers (a long prompt), each conversation has a
:class:`Line` of its own: one kept-alive connection, whose socket httpcore's ``trace``
extension reports when it connects.

On llama-server a turn may take the token route (:mod:`app.remote.completion`): its
prompt is rendered and tokenized first (on this worker thread too), then streamed from
``/completion``; its :class:`Ended` carries what the server's cache holds afterwards.

Retries only where the turn cannot run twice: a connection that failed before the request
was sent, and one 429 whose ``Retry-After`` is within the connection's bound.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx2

from app.engine import SamplingParams
from app.engine.chat_template import ReasoningOptions
from app.engine.reasoning import Channel, ReasoningFormat, ReasoningSplitter
from app.remote.completion import (
    ROUTE,
    Held,
    Prepared,
    Renderer,
    finish_of,
    held_after,
    prepare,
    read_piece,
)
from app.remote.connection import RemoteConnection
from app.remote.faults import (
    FaultKind,
    RemoteError,
    RemoteFault,
    malformed,
    status_fault,
    transport_fault,
)
from app.remote.room import ContextFull, ContextRoom, fit
from app.remote.wire import CallPiece, Chunk, Figures, read_chunk

log = logging.getLogger(__name__)

CONNECT_RETRIES = 2  # more tries after a refused connection
CONNECT_BACKOFF_S = 0.25  # doubled each try
MAX_ERROR_BODY = 8192  # bytes of an error response read for its message


@dataclass(frozen=True)
class Streamed:
    key: int
    channel: Channel
    text: str


@dataclass(frozen=True)
class CallStreamed:
    """A piece of a tool call (``delta.tool_calls``), as the server split it."""

    key: int
    piece: CallPiece


@dataclass(frozen=True)
class Progressed:
    key: int
    done: int
    total: int


@dataclass(frozen=True)
class Ended:
    key: int
    finish_reason: str | None  # the server's ("stop", "length"...); None: it did not say
    figures: Figures | None
    fault: RemoteFault | None = None
    cancelled: bool = False
    first_token_at: float = 0.0  # perf_counter() of the first streamed text (0: none)
    last_token_at: float = 0.0
    n_pieces: int = 0  # streamed chunks with text (a token count where the server says none)
    held: tuple[Held, ...] = ()  # the token route's prompt (and reply), as the cache holds them


TurnEvent = Streamed | CallStreamed | Progressed | Ended
TokenRoute = tuple[SamplingParams, tuple[Held, ...], Renderer, ReasoningOptions]


class Line:
    """One conversation's connection to the server: an httpx2 client of one kept-alive
    connection, and that connection's socket (to interrupt a read from another thread)."""

    def __init__(self, client: httpx2.Client) -> None:
        self.client = client
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._close_after_turn = False

    def trace(self, name: str, info: dict[str, Any]) -> None:
        """httpcore's trace extension: keeps the socket of each new connection."""
        if name in ("connection.connect_tcp.complete", "connection.start_tls.complete"):
            stream = info.get("return_value")
            sock = stream.get_extra_info("socket") if stream is not None else None
            if isinstance(sock, socket.socket):
                with self._lock:
                    self._sock = sock

    def interrupt(self) -> None:
        """Shut the connection down (any thread): a read blocked on it returns at once."""
        with self._lock:
            sock = self._sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass  # already closed

    def close_after_turn(self) -> None:
        self._close_after_turn = True

    def turn_ended(self) -> None:
        if self._close_after_turn:
            self.client.close()


class RemoteTurn:
    """See the module docstring."""

    def __init__(
        self,
        key: int,
        line: Line,
        conn: RemoteConnection,
        body: dict[str, Any],
        sink: Callable[[TurnEvent], None],
        reasoning: ReasoningFormat,
        *,
        tokens: TokenRoute | None = None,
        room: ContextRoom | None = None,
    ) -> None:
        """``tokens``: take the token route (the turn's sampling, what the last turn left
        in the cache, the engine's renderer, the turn's reasoning options). ``room``: cap
        the reply to the room the server's context has left (:mod:`app.remote.room`)."""
        self.key = key
        self._line = line
        self._conn = conn
        self._body = body
        self._sink = sink
        self._splitter = ReasoningSplitter(reasoning)
        self._cancelled = threading.Event()
        self._first_at = 0.0
        self._last_at = 0.0
        self._n_pieces = 0
        self._tokens = tokens
        self._room = room
        self._prepared: Prepared | None = None
        self._reply: list[str] = []
        self._reply_tokens: list[int] = []
        self._stop_type: str | None = None
        self._n_predicted: int | None = None
        self._thread = threading.Thread(target=self._run, name=f"remote-turn-{key}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def cancel(self) -> None:
        """Give the turn up (any thread): its stream is closed; :class:`Ended` follows."""
        self._cancelled.set()
        self._line.interrupt()

    def join(self, timeout: float | None = None) -> bool:
        self._thread.join(timeout)
        return not self._thread.is_alive()

    # ---------------------------------------------------------------- the worker thread

    def _run(self) -> None:
        try:
            ended = self._attempts()
        except Exception as exc:  # a bug: the turn still ends, with a sentence
            fault = RemoteFault(FaultKind.MALFORMED, f"The remote turn failed: {exc!r}.")
            ended = self._ended(None, None, fault)
        self._line.turn_ended()
        self._sink(ended)

    def _attempts(self) -> Ended:
        client = self._line.client
        try:
            if self._tokens is not None:
                sampling, held, renderer, reasoning = self._tokens
                text = renderer.render(client, self._conn, self._body, reasoning)
                self._prepared = prepare(self._body, sampling, held, text)
            if self._room is not None:
                self._fit_room(client, self._room)
        except ContextFull as exc:
            return self._ended(None, None, exc.fault)
        except RemoteError as exc:
            if self._cancelled.is_set():
                return self._ended(None, None, cancelled=True)
            return self._ended(None, None, exc.fault)
        backoff = CONNECT_BACKOFF_S
        connect_tries = 0
        waited_429 = False
        while True:
            ended = self._once()
            fault = ended.fault
            if fault is None or self._cancelled.is_set() or self._n_pieces:
                return ended
            if fault.retry_safe and connect_tries < CONNECT_RETRIES:
                connect_tries += 1
                log.info(
                    "%s Trying again in %.2f s (%d of %d).",
                    fault.message,
                    backoff,
                    connect_tries,
                    CONNECT_RETRIES,
                )
                if self._cancelled.wait(backoff):
                    return self._ended(None, None, cancelled=True)
                backoff *= 2
                continue
            wait = fault.retry_after_s
            if (
                fault.kind is FaultKind.RATE_LIMITED
                and not waited_429
                and wait is not None
                and wait <= self._conn.max_retry_after_s
            ):
                waited_429 = True
                if self._cancelled.wait(wait):
                    return self._ended(None, None, cancelled=True)
                continue
            return ended

    def _fit_room(self, client: httpx2.Client, room: ContextRoom) -> None:
        """Cap the reply to the server's context (raises ContextFull when it is full).
        Where counting failed the turn goes as it is: the server's own answer says more
        than a failed count (and a server that is down gets the usual retries)."""
        prepared = self._prepared
        text = prepared.prompt_text if prepared else None
        try:
            n = fit(client, self._conn, room, self._body, text)
        except ContextFull:
            raise
        except RemoteError as exc:
            log.info("the prompt's tokens could not be counted: %s", exc)
            return
        if n == room.max_tokens:
            return
        self._body = {**self._body, "max_tokens": n}
        if prepared is not None:
            self._prepared = dataclasses.replace(prepared, body={**prepared.body, "n_predict": n})

    def _once(self) -> Ended:
        prepared = self._prepared
        url = self._conn.root + (ROUTE if prepared is not None else "/v1/chat/completions")
        payload = prepared.body if prepared is not None else self._body
        headers = self._conn.headers() | {"Accept": "text/event-stream"}
        streaming = False
        extensions = {"trace": self._line.trace}
        try:
            with self._line.client.stream(
                "POST", url, json=payload, headers=headers, extensions=extensions
            ) as response:
                if self._cancelled.is_set():
                    return self._ended(None, None, cancelled=True)
                if response.status_code != 200:
                    body = response.read()[:MAX_ERROR_BODY].decode("utf-8", "replace")
                    fault = status_fault(
                        self._conn.label,
                        response.status_code,
                        body,
                        response.headers,
                        with_tools="tools" in payload,
                    )
                    return self._ended(None, None, fault)
                streaming = True
                return self._read(response)
        except httpx2.HTTPError as exc:
            if self._cancelled.is_set():
                return self._ended(None, None, cancelled=True)
            return self._ended(
                None, None, transport_fault(self._conn.label, exc, streaming=streaming)
            )

    def _read(self, response: httpx2.Response) -> Ended:
        finish: str | None = None
        figures: Figures | None = None
        done = False
        for event in httpx2.EventSource(response):
            if self._cancelled.is_set():
                return self._ended(finish, figures, cancelled=True)
            data = event.data.strip()
            if not data:
                continue
            if data == "[DONE]":
                done = True
                break
            try:
                parsed = json.loads(data)
            except ValueError:
                return self._ended(finish, figures, malformed(self._conn.label, "JSON"))
            chunk = read_chunk(parsed)
            if chunk is None:
                return self._ended(
                    finish, figures, malformed(self._conn.label, "a chat completion chunk")
                )
            if chunk.error is not None:
                fault = RemoteFault(
                    FaultKind.SERVER, f'{self._conn.label} failed mid-reply: "{chunk.error}"'
                )
                return self._ended(finish, figures, fault)
            if chunk.progress is not None:
                self._sink(Progressed(self.key, *chunk.progress))
            if self._prepared is not None:
                chunk = self._token_chunk(parsed, chunk)
            if chunk.reasoning:
                self._emit(Channel.REASONING, chunk.reasoning)
            if chunk.answer:
                for piece in self._splitter.feed(chunk.answer):
                    self._emit(piece.channel, piece.text)
            for call in chunk.calls:
                self._mark()
                self._sink(CallStreamed(self.key, call))
            finish = chunk.finish_reason or finish
            figures = chunk.figures or figures
        if self._cancelled.is_set():
            return self._ended(finish, figures, cancelled=True)
        if not done and finish is None:
            fault = RemoteFault(
                FaultKind.DROPPED,
                f"The connection to {self._conn.label} broke off before the reply ended.",
            )
            return self._ended(finish, figures, fault)
        for piece in self._splitter.flush():
            self._emit(piece.channel, piece.text)
        return self._ended(finish, figures)

    def _token_chunk(self, data: dict[str, Any], chunk: Chunk) -> Chunk:
        """A ``/completion`` chunk as a chat chunk (its text, its end), keeping its tokens."""
        piece = read_piece(data)
        self._reply.append(piece.content)
        self._reply_tokens += piece.tokens
        if piece.stop_type is not None:
            self._stop_type, self._n_predicted = piece.stop_type, piece.n_predicted
        return dataclasses.replace(
            chunk, answer=piece.content, finish_reason=finish_of(piece.stop_type)
        )

    def _emit(self, channel: Channel, text: str) -> None:
        self._mark()
        self._sink(Streamed(self.key, channel, text))

    def _mark(self) -> None:
        """A piece of the reply came (text or a call's: either means no retry now)."""
        now = time.perf_counter()
        if not self._first_at:
            self._first_at = now
        self._last_at = now
        self._n_pieces += 1

    def _ended(
        self,
        finish: str | None,
        figures: Figures | None,
        fault: RemoteFault | None = None,
        *,
        cancelled: bool = False,
    ) -> Ended:
        held: tuple[Held, ...] = ()
        if self._prepared is not None:
            # a failed or cancelled reply keeps the prompt's parts only (the stop type
            # is not known then)
            held = held_after(
                self._prepared,
                "".join(self._reply),
                self._reply_tokens,
                self._stop_type if fault is None and not cancelled else None,
                self._n_predicted,
            )
        return Ended(
            self.key,
            finish,
            figures,
            fault,
            cancelled,
            self._first_at,
            self._last_at,
            self._n_pieces,
            held,
        )
