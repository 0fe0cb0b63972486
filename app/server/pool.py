"""Which session conversation serves a request: warm caches per client.

- A request naming a conversation gets that client's storage conversation (created on
  first use, found again after a restart), whose cache is restored from its state file.
- Any other request gets the idle resident *scratch* conversation whose last prompt shares
  the longest token prefix with its own (as llama-server's ``cache_prompt``), else a new
  one; scratch conversations use negative ids, are never stored and never saved.
- At most ``max_resident`` idle API conversations stay open; beyond that the least
  recently used are closed (named ones save their state file first).
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from app.engine.prefix import common_prefix
from app.server.errors import ApiError
from app.server.store import ConversationStore
from app.session import ContextFullPolicy, Session
from app.session import events as ev

Sink = Callable[[ev.ConversationEvent], None]


@dataclass
class ApiConversation:
    cid: int
    name: str | None  # None: scratch
    tokens: tuple[int, ...] = ()  # the last prompt it was given
    busy: bool = False
    open: bool = False
    last_used: float = field(default_factory=time.monotonic)
    last_finish: str | None = None
    sink: Sink | None = None
    unsubscribe: Callable[[], None] | None = None

    def deliver(self, event: ev.ConversationEvent) -> None:
        sink = self.sink
        if sink is not None:
            sink(event)


IN_USE_MESSAGE = (
    "This conversation is open in a LlamaDesk tab; close the tab or use another conversation id."
)


class ConversationPool:
    def __init__(
        self,
        session: Session,
        store: ConversationStore | None,
        max_resident: int,
        in_use_elsewhere: Callable[[int], bool] | None = None,
    ) -> None:
        """``in_use_elsewhere(storage id)``: True while another client of the session (a
        window tab) has the conversation open; called on request threads."""
        self._session = session
        self._store = store
        self._in_use_elsewhere = in_use_elsewhere
        self.max_resident = max(1, max_resident)
        self._lock = threading.Lock()
        self._convs: dict[int, ApiConversation] = {}
        self._named: dict[str, int] = store.names() if store is not None else {}
        self._scratch_ids = itertools.count(-1, -1)

    def conversations(self) -> list[ApiConversation]:
        with self._lock:
            return sorted(self._convs.values(), key=lambda c: (c.name is None, c.cid))

    def _ensure(self, conv: ApiConversation) -> None:
        """Subscribed and open in the session (under the lock)."""
        if conv.unsubscribe is None:
            conv.unsubscribe = self._session.subscribe(conv.cid, conv.deliver)
        if not conv.open:
            self._session.open(conv.cid, ContextFullPolicy.STOP)
            conv.open = True

    def acquire(self, name: str | None, tokens: tuple[int, ...]) -> tuple[ApiConversation, int]:
        """The conversation for a request, marked busy, and the prefix it shares."""
        if name is not None:
            return self._acquire_named(name), 0
        with self._lock:
            best: ApiConversation | None = None
            best_n = 0
            idle = [c for c in self._convs.values() if c.name is None and not c.busy]
            for conv in idle:
                n = common_prefix(conv.tokens, tokens)
                if n > best_n:
                    best, best_n = conv, n
            if best is None:
                scratch = sum(1 for c in self._convs.values() if c.name is None)
                if idle and scratch >= self.max_resident:
                    best = min(idle, key=lambda c: c.last_used)  # reuse the oldest
                else:
                    best = ApiConversation(next(self._scratch_ids), None)
                    self._convs[best.cid] = best
            best.busy = True
            best.last_used = time.monotonic()
            self._ensure(best)
            return best, best_n

    def _acquire_named(self, name: str) -> ApiConversation:
        with self._lock:
            cid = self._named.get(name)
        if cid is None or (self._store is not None and not self._store.exists(cid)):
            if self._store is None:
                raise ApiError(
                    400, "Named conversations need the app's database.", param="conversation"
                )
            cid = self._store.create(name)
            with self._lock:
                self._named[name] = cid
        if self._in_use_elsewhere is not None and self._in_use_elsewhere(cid):
            # Two writers on one sequence would interleave their tokens.
            raise ApiError(409, IN_USE_MESSAGE, param="conversation", code="conversation_in_use")
        with self._lock:
            conv = self._convs.get(cid)
            if conv is None:
                conv = self._convs[cid] = ApiConversation(cid, name)
            if conv.busy:
                raise ApiError(
                    409,
                    f"The conversation {name!r} is answering another request; wait for it "
                    "or use another conversation id.",
                    param="conversation",
                    code="conversation_busy",
                )
            conv.busy = True
            conv.last_used = time.monotonic()
            self._ensure(conv)
            return conv

    def take_slot(self, index: int) -> ApiConversation:
        """The conversation listed at ``index`` in ``/slots``, marked busy (for a slot
        action), or a 404/409 sentence."""
        with self._lock:
            listed = sorted(self._convs.values(), key=lambda c: (c.name is None, c.cid))
            if not 0 <= index < len(listed):
                raise ApiError(
                    404,
                    f"There is no slot {index}: GET /slots lists {len(listed)} "
                    "(a slot is an API conversation, made by a request).",
                    code="slot_not_found",
                )
            conv = listed[index]
            if conv.busy:
                raise ApiError(
                    409,
                    f"Slot {index} is answering a request; retry when it is done.",
                    code="slot_busy",
                )
            if self._in_use_elsewhere is not None and self._in_use_elsewhere(conv.cid):
                raise ApiError(409, IN_USE_MESSAGE, code="conversation_in_use")
            conv.busy = True
            conv.last_used = time.monotonic()
            self._ensure(conv)
            return conv

    def erase(self, conv: ApiConversation) -> None:
        """Drop a (busy-marked) conversation's cache from memory without saving it; the
        entry stays (slot numbers do not move) and is reopened empty on its next use."""
        with self._lock:
            self._session.close(conv.cid, save=False)
            conv.open = False
            conv.tokens = ()

    def is_busy(self, cid: int) -> bool:
        """An API request is generating into this conversation right now."""
        with self._lock:
            conv = self._convs.get(cid)
            return conv is not None and conv.busy

    def handed_over(self, cids: set[int]) -> None:
        """Window tabs opened or closed these conversations: their sequences are the
        tabs' (and a closing tab closes them), so an idle API entry reopens at its next
        use."""
        with self._lock:
            for conv in self._convs.values():
                if conv.cid in cids and not conv.busy:
                    conv.open = False
                    conv.tokens = ()

    def release(self, conv: ApiConversation, tokens: tuple[int, ...] | None) -> None:
        with self._lock:
            conv.busy = False
            conv.sink = None
            conv.last_used = time.monotonic()
            if tokens is not None:
                conv.tokens = tokens
        self.trim()

    def trim(self) -> None:
        """Close the least recently used idle conversations beyond ``max_resident``."""
        with self._lock:
            open_idle = sorted(
                (c for c in self._convs.values() if c.open and not c.busy),
                key=lambda c: c.last_used,
            )
            n_open = sum(1 for c in self._convs.values() if c.open)
            closing = open_idle[: max(0, n_open - self.max_resident)]
            for conv in closing:
                self._forget(conv)

    def _forget(self, conv: ApiConversation) -> None:
        if conv.name is None:
            self._session.close(conv.cid, save=False)
            if conv.unsubscribe is not None:
                conv.unsubscribe()
            del self._convs[conv.cid]
        else:
            self._session.close(conv.cid, save=True)
            conv.open = False
            conv.tokens = ()

    def close_all(self) -> None:
        """Close every API conversation (named ones save their caches) and stop following
        them: the server inside the window stops, the window's session goes on."""
        with self._lock:
            for conv in list(self._convs.values()):
                if conv.open:
                    self._session.close(conv.cid, save=conv.name is not None)
                    conv.open = False
                if conv.unsubscribe is not None:
                    conv.unsubscribe()
                    conv.unsubscribe = None
            self._convs.clear()
