"""An OpenAI-compatible server as a :class:`~app.session.engine_port.ConversationEngine`.

Each conversation is a sequence ``key`` with, where the server has slots (llama-server),
a slot of its own (``id_slot``), so that its prompt cache stays warm between turns. A
turn streams on a worker thread (:class:`~app.remote.turn.RemoteTurn`); :meth:`step`, on
the session thread, waits briefly for what the workers handed in and turns it into the
engine's events. A failure is that conversation's alone: a ``SequenceFailed`` with the
sentence, then ``Finished`` with the text streamed so far (``aborted``, so it is kept and
marked stopped) or, when nothing came, ``error``.

Beyond turns it can only keep caches on llama-server started with ``--slot-save-path``
(:attr:`capabilities` is then ``STATE_FILES``): a conversation's slot is saved to a file
on the server when it closes and restored into its slot when it opens again
(:mod:`app.remote.slots`; the session stores the file's name). The server's cache cannot
be forked or read as tokens, so the session re-sends the text for those. It never
touches the database: the session's recorder writes what it reports.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import queue
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NoReturn, TypeVar

import httpx2

from app.engine import (
    Completion,
    ContextSettings,
    Finished,
    PromptProgress,
    RestoreOutcome,
    SamplingParams,
    SequenceFailed,
    TokenText,
    ToolCallArguments,
    ToolCallStarted,
)
from app.engine import Event as EngineEvent
from app.engine.context_policy import ContextFullPolicy
from app.engine.reasoning import Channel, ReasoningFormat, detect_format
from app.engine.tool_calls.request import ToolRequest
from app.errors import LlamaDeskError
from app.remote.completion import Held, Renderer
from app.remote.connection import RemoteConnection
from app.remote.probe import ServerTraits, loaded_model
from app.remote.room import ContextRoom
from app.remote.slots import SlotFile, SlotServerDown, restore_slot, save_slot
from app.remote.slots import new_name as new_slot_name
from app.remote.tool_stream import CallAssembler
from app.remote.turn import CallStreamed, Ended, Line, Progressed, RemoteTurn, Streamed, TurnEvent
from app.remote.wire import chat_body, finish_reason
from app.session.engine_port import (
    Capability,
    ChatPrompt,
    EngineMemory,
    Forked,
    Prompt,
    Restored,
    SequenceView,
    capability_missing,
)
from app.session.types import ChatMessage, LoadedModel

if TYPE_CHECKING:
    from app.engine import Engine

log = logging.getLogger(__name__)

T = TypeVar("T")

STEP_WAIT_S = 0.01  # a step with nothing streamed waits this long (no busy loop, commands flow)
SHUTDOWN_JOIN_S = 2.0
SLOTS_DOWN_S = 30.0  # after a save the server did not take, the next saves are not tried
MAX_HELD = 16  # earlier turns kept for the token route (an edit or regenerate goes back)  # how long closing waits for the workers' streams to close


@dataclass
class _Seq:
    slot: int | None
    line: Line
    policy: ContextFullPolicy | None = None
    n_tokens: int = 0  # prompt + reply of the last turn, as the server counted them
    turn: RemoteTurn | None = None
    answer: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    reasoning_start: float = 0.0
    reasoning_end: float = 0.0
    sent_at: float = 0.0
    slot_file: str = ""  # its cache's file on the server (slot files; "": none yet)
    # what its turns sent and got, as tokens (the token route), the latest last
    held: tuple[Held, ...] = ()
    tools: ToolRequest | None = None  # the turn's tools (None: it offered none)
    calls: CallAssembler = field(default_factory=CallAssembler)


class RemoteEngine:
    """See the module docstring."""

    def __init__(
        self,
        conn: RemoteConnection,
        traits: ServerTraits,
        new_client: Callable[[], httpx2.Client],
        *,
        name: str | None = None,
        address: str | None = None,
    ) -> None:
        """``new_client``: a client for one conversation's connection; ``name`` and
        ``address``: see :class:`~app.remote.loader.RemoteLoader`."""
        self.conn = conn
        self.machine = name or conn.label
        self.address = address
        self.traits = traits
        self._new_client = new_client
        self._seqs: dict[int, _Seq] = {}
        self._keys = itertools.count(1)
        self._pieces = itertools.count()  # a number per streamed piece (the rate counts them)
        self._inbox: queue.SimpleQueue[tuple[RemoteTurn, TurnEvent]] = queue.SimpleQueue()
        self._stops: set[int] = set()
        self._stop_all = False
        self._lock = threading.Lock()
        self._closed = False
        self._slot_owner: dict[int, int] = {}  # slot -> the conversation whose cache it holds
        self._slots_down_until = 0.0  # monotonic: slot saves not tried before then
        self.renderer = Renderer(traits.chat_template, traits.bos_token, traits.eos_token)
        self._reasoning = (
            detect_format(traits.chat_template)
            if traits.chat_template
            else ReasoningFormat.THINK_TAGS  # the markers count only at a reply's very start
        )
        # The first reply tells where the probe could not (vLLM, Ollama, plain OpenAI).
        self.reports_cached: bool | None = traits.reports_cached
        self.default_policy = ContextFullPolicy.SHIFT

    # ---------------------------------------------------------------- what it is

    @property
    def capabilities(self) -> Capability:
        return Capability.STATE_FILES if self.traits.slot_files else Capability.NONE

    @property
    def ready(self) -> bool:
        return not self._closed

    @property
    def fingerprint(self) -> str:
        return f"remote:{self.conn.root}:{self.traits.model}"

    def unavailable(self) -> tuple[str, ...]:
        """What the server does not give, as known now (the first reply tells whether
        cached tokens are reported where the probe could not)."""
        return dataclasses.replace(self.traits, reports_cached=self.reports_cached).unavailable()

    @property
    def engine_name(self) -> str:
        """Which machine and server answer ("llama-server on gpu-box:8080")."""
        return f"{self.traits.kind.value} on {self.machine}"

    def describe(self) -> LoadedModel:
        return loaded_model(self.traits, self.fingerprint, self.engine_name, self.address)

    def memory(self) -> EngineMemory:
        return EngineMemory(n_ctx=self.traits.n_ctx or 0)

    def set_default_policy(self, policy: ContextFullPolicy) -> None:
        self.default_policy = policy  # the server decides what a full context does

    def set_policy(self, key: int, policy: ContextFullPolicy | None) -> None:
        self._seq(key).policy = policy

    # ---------------------------------------------------------------- conversations

    def _seq(self, key: int) -> _Seq:
        seq = self._seqs.get(key)
        if seq is None:
            raise LlamaDeskError(f"The remote engine has no conversation {key}.")
        return seq

    def _free_slot(self) -> int | None:
        """The server's slot fewest conversations use (one each while there are enough)."""
        if not self.traits.pins_slots:
            return None
        used = Counter(s.slot for s in self._seqs.values())
        return min(range(self.traits.total_slots), key=lambda slot: (used[slot], slot))

    def open(self) -> int:
        key = next(self._keys)
        self._seqs[key] = _Seq(self._free_slot(), Line(self._new_client()))
        return key

    def close(self, key: int) -> None:
        seq = self._seqs.pop(key, None)
        if seq is None:
            return
        if seq.slot is not None and self._slot_owner.get(seq.slot) == key:
            del self._slot_owner[seq.slot]  # (its file, if saved, is the session's to restore)
        if seq.turn is not None:
            seq.line.close_after_turn()  # the worker may still be in the client
            seq.turn.cancel()  # the server frees the slot when the stream closes
        else:
            seq.line.client.close()

    def cut(self, key: int) -> None:
        seq = self._seq(key)
        seq.n_tokens = 0  # the server's cache follows the prompt it is sent
        seq.held = ()

    def tokens(self, key: int) -> tuple[int, ...]:
        return ()

    def holds_anything(self, key: int) -> bool:
        """Whether its slot holds this conversation's cache (a slot file can save it)."""
        seq = self._seq(key)
        return (
            self.traits.slot_files
            and seq.slot is not None
            and self._slot_owner.get(seq.slot) == key
            and seq.n_tokens > 0
        )

    def slot(self, key: int) -> int | None:
        """The server slot the conversation is pinned to (None: no slots)."""
        return self._seq(key).slot

    def pinned_slots(self) -> list[int | None]:
        """Every open conversation's slot, in the order they were opened (diagnostics)."""
        return [seq.slot for _, seq in sorted(list(self._seqs.items()))]

    def status(self, key: int) -> SequenceView:
        seq = self._seq(key)
        busy = seq.turn is not None
        return SequenceView(seq.n_tokens, self.traits.n_ctx or 0, True, busy, busy)

    def is_busy(self, key: int) -> bool:
        seq = self._seqs.get(key)
        return seq is not None and seq.turn is not None

    def has_work(self) -> bool:
        return any(s.turn is not None for s in self._seqs.values())

    # ---------------------------------------------------------------- turns

    def start(self, key: int, prompt: Prompt, sampling: SamplingParams) -> int:
        """Send the turn; returns 0: how much of the prompt the server reads again is only
        known from its reply (``Completion.n_prompt_processed``)."""
        if self._closed:
            raise LlamaDeskError("The connection to the remote server is closed.")
        if not isinstance(prompt, ChatPrompt):
            raise LlamaDeskError(capability_missing(Capability.TOKENS))
        seq = self._seq(key)
        if seq.turn is not None:
            raise LlamaDeskError("This conversation is still answering.")
        with self._lock:
            self._stops.discard(key)
        body = chat_body(self.traits, prompt, sampling, seq.slot)
        turn: RemoteTurn | None = None

        def sink(event: TurnEvent) -> None:
            assert turn is not None
            self._inbox.put((turn, event))

        # /completion streams text only: a turn with tools takes the chat route, where the
        # server parses the calls (the token route's cache stays valid: it follows the prompt)
        route = (
            (sampling, seq.held, self.renderer, prompt.reasoning)
            if self.traits.token_prompts and prompt.tools is None
            else None
        )
        room = (
            ContextRoom(self.traits.n_ctx, sampling.max_tokens, self.renderer, prompt.reasoning)
            if self.traits.n_ctx and self.traits.counts_tokens and sampling.max_tokens > 0
            else None
        )
        turn = RemoteTurn(
            key, seq.line, self.conn, body, sink, self._reasoning, tokens=route, room=room
        )
        seq.turn = turn
        if seq.slot is not None:
            self._slot_owner[seq.slot] = key
        seq.answer, seq.reasoning = [], []
        seq.tools, seq.calls = prompt.tools, CallAssembler()
        seq.reasoning_start = seq.reasoning_end = 0.0
        seq.sent_at = time.perf_counter()
        turn.start()
        return 0

    def stop(self, key: int | None) -> None:
        with self._lock:
            if key is None:
                self._stop_all = True
            else:
                self._stops.add(key)

    def step(self) -> list[EngineEvent]:
        events: list[EngineEvent] = []
        self._take_stops(events)
        try:
            items = [self._inbox.get(timeout=STEP_WAIT_S)]
        except queue.Empty:
            return events
        while True:
            try:
                items.append(self._inbox.get_nowait())
            except queue.Empty:
                break
        for turn, event in items:
            seq = self._seqs.get(turn.key)
            if seq is None or seq.turn is not turn:
                continue  # a turn given up (stopped, closed): its late events are dropped
            self._take(turn.key, seq, event, events)
        return events

    def _take_stops(self, events: list[EngineEvent]) -> None:
        with self._lock:
            stops, self._stops = self._stops, set()
            if self._stop_all:
                stops |= set(self._seqs)
                self._stop_all = False
        for key in stops:
            seq = self._seqs.get(key)
            if seq is not None and seq.turn is not None:
                seq.turn.cancel()  # ends at once: the worker's Ended is not waited for
                self._finish(key, seq, "aborted", None, events)

    def _take(self, key: int, seq: _Seq, event: TurnEvent, events: list[EngineEvent]) -> None:
        if isinstance(event, Streamed):
            now = time.perf_counter()
            if event.channel is Channel.REASONING:
                seq.reasoning.append(event.text)
                seq.reasoning_start = seq.reasoning_start or now
                seq.reasoning_end = now
            else:
                seq.answer.append(event.text)
            events.append(TokenText(key, event.text, next(self._pieces), event.channel))
        elif isinstance(event, CallStreamed):
            for step in seq.calls.feed(event.piece):
                if step.started:
                    events.append(ToolCallStarted(key, step.index, step.call_id, step.name))
                if step.fragment:
                    events.append(ToolCallArguments(key, step.index, step.fragment))
        elif isinstance(event, Progressed):
            events.append(PromptProgress(key, event.done, event.total))
        else:
            self._end(key, seq, event, events)

    def _end(self, key: int, seq: _Seq, ended: Ended, events: list[EngineEvent]) -> None:
        fault = ended.fault
        if ended.cancelled:
            self._finish(key, seq, "aborted", ended, events)
        elif fault is not None:
            events.append(SequenceFailed(key, fault.message))
            # what came is kept (and marked stopped); a reply with nothing is an error
            reason = "aborted" if seq.answer or seq.reasoning or seq.calls.started else "error"
            self._finish(key, seq, reason, ended, events, error=fault.message)
        else:
            self._finish(key, seq, finish_reason(ended.finish_reason), ended, events)

    def _finish(
        self,
        key: int,
        seq: _Seq,
        reason: str,
        ended: Ended | None,
        events: list[EngineEvent],
        error: str | None = None,
    ) -> None:
        now = time.perf_counter()
        seq.turn = None
        if ended is not None:  # (a turn given up leaves what it held before)
            seq.held = (seq.held + ended.held)[-MAX_HELD:]
        figures = ended.figures if ended is not None else None
        first = ended.first_token_at if ended is not None else 0.0
        last = ended.last_token_at if ended is not None else 0.0
        n_pieces = ended.n_pieces if ended is not None else 0
        completion = Completion(
            text="".join(seq.answer),
            finish_reason=reason,
            error=error,
            reasoning="".join(seq.reasoning),
            first_token_at=first,
            last_token_at=last,
        )
        if seq.calls.started:
            calls, broken = seq.calls.result(
                seq.tools, complete=reason not in ("aborted", "error", "length")
            )
            completion.tool_calls, completion.tool_errors = list(calls), list(broken)
            if calls and reason in ("eog", "stop"):
                completion.finish_reason = "tool_calls"  # the client runs them
        if seq.reasoning:
            completion.reasoning_ms = (seq.reasoning_end - seq.reasoning_start) * 1000.0
        if figures is not None:
            cached = figures.n_cached
            if cached is not None:
                self.reports_cached = True
            elif self.reports_cached is None:
                self.reports_cached = False
            completion.n_prompt = figures.n_prompt or 0
            completion.n_prompt_processed = max(0, completion.n_prompt - (cached or 0))
            completion.n_sampled = figures.n_generated or n_pieces
            seq.n_tokens = completion.n_prompt + (figures.n_generated or 0)
        else:
            completion.n_sampled = n_pieces
        # no token ids come back: the reply's length is the server's count (usage's
        # completion_tokens, timings.predicted_n), else the streamed pieces (one token each
        # on llama-server and LlamaDesk)
        completion.n_reply_tokens = completion.n_sampled
        measured_prompt_ms = ((first or now) - seq.sent_at) * 1000.0
        completion.prompt_ms = (
            figures.prompt_ms if figures and figures.prompt_ms is not None else measured_prompt_ms
        )
        completion.gen_ms = (
            figures.gen_ms
            if figures and figures.gen_ms is not None
            else max(0.0, (last - first) * 1000.0)
        )
        events.append(Finished(key, completion))

    def take_events(self) -> list[EngineEvent]:
        return []

    # ---------------------------------------------------------------- what it cannot do

    def fork(self, key: int, messages: tuple[ChatMessage, ...], system: str) -> Forked:
        raise LlamaDeskError(capability_missing(Capability.FORK_CACHE))

    def _slot_of(self, key: int) -> tuple[_Seq, int]:
        seq = self._seq(key)
        if not self.traits.slot_files or seq.slot is None:
            raise LlamaDeskError(capability_missing(Capability.STATE_FILES))
        if seq.turn is not None:
            raise LlamaDeskError("This conversation is still answering.")
        return seq, seq.slot

    def save(self, key: int) -> bytes:
        """Save the conversation's slot to its file on the server; the bytes name it."""
        seq, slot = self._slot_of(key)
        if self._slot_owner.get(slot) != key:
            raise LlamaDeskError("Its slot holds another conversation's cache now.")
        if time.monotonic() < self._slots_down_until:
            raise LlamaDeskError(f"{self.conn.label} did not answer just now: not saved.")
        seq.slot_file = seq.slot_file or new_slot_name()
        try:
            return save_slot(seq.line.client, self.conn, slot, seq.slot_file).to_bytes()
        except SlotServerDown:
            self._slots_down_until = time.monotonic() + SLOTS_DOWN_S  # the other tabs' too
            raise

    def parked_state(self, key: int) -> bytes | None:
        return None  # the server never parks a conversation here

    def restore(self, key: int, data: bytes) -> Restored:
        """Restore the conversation's slot file into its slot (REFUSED with the server's
        sentence: the next turn re-sends the text, as it would anyway)."""
        seq, slot = self._slot_of(key)
        saved = SlotFile.of(data)
        if saved is None:
            return Restored(RestoreOutcome.REFUSED, "The saved state is no llama-server slot.")
        try:
            n = restore_slot(seq.line.client, self.conn, slot, saved.name)
        except LlamaDeskError as exc:
            return Restored(RestoreOutcome.REFUSED, str(exc))
        self._slot_owner[slot] = key
        seq.slot_file = saved.name  # saved again under the same name
        seq.n_tokens = n
        seq.held = ()  # its tokens are the server's: the next turn sends the whole text
        return Restored(RestoreOutcome.RESTORED)

    def save_file(self, key: int, path: str) -> int:
        raise LlamaDeskError(capability_missing(Capability.STATE_FILES))

    def restore_file(self, key: int, path: str) -> Restored:
        raise LlamaDeskError(capability_missing(Capability.STATE_FILES))

    def reconfigure(self, settings: ContextSettings) -> None:
        raise LlamaDeskError(f"The context of {self.engine_name} is set on that server, not here.")

    def call(self, fn: Callable[[Engine], T]) -> NoReturn:
        raise LlamaDeskError(capability_missing(Capability.LOCAL_CALLS))

    def shutdown(self) -> None:
        """Close every stream and the connection pool (bounded)."""
        self._closed = True
        seqs = list(self._seqs.values())
        self._seqs.clear()
        for seq in seqs:
            if seq.turn is not None:
                seq.turn.cancel()
        deadline = time.perf_counter() + SHUTDOWN_JOIN_S
        for seq in seqs:
            if seq.turn is None or seq.turn.join(max(0.0, deadline - time.perf_counter())):
                seq.line.client.close()
            else:
                seq.line.close_after_turn()
