"""Connections, bounded in number and in time: one selector thread holds every connection
that is not being answered, a thread answers each request whose head has arrived.

Why not the standard library's ``ThreadingHTTPServer`` alone: it gives every socket a
thread from ``accept`` on, so a cap on threads counts sockets that sent nothing (64 idle
sockets locked every client out, before the API key was even read), and its timeout is per
``recv``, so one header byte every few seconds held a thread forever. Why not uvicorn:
its ``--limit-concurrency`` counts open connections too (``len(server_state.connections)``
in its protocol classes), and its only timer, the keep-alive one, restarts on every byte
received (uvicorn issue #157 still lists ``--timeout-request-start`` as to do); the same
code as here would have to wrap its protocol classes.

Here:

- **The head arrives whole within** ``head_timeout_s`` of the connection (or of its first
  byte after a keep-alive pause), however it trickles; then a 408 and the connection is
  closed. Request lines beyond :data:`MAX_REQUEST_LINE` get a 414, heads beyond
  :data:`MAX_HEAD` a 431, TLS or other non-HTTP bytes a 400 - all JSON.
- **The body arrives whole within** :meth:`ServerConfig.body_timeout` (read by the
  answering thread through :class:`ConnReader`).
- **The cap counts only requests being answered** (``max_connections``, beyond: 503;
  when it is reached while a request is still sending its body, the one that has been
  sending longest is ended instead, so trickled bodies cannot hold the threads either).
  Connections sending their head, idle between requests (closed after
  ``idle_timeout_s``) or being closed wait in the selector, no thread each; at most
  ``max_pending`` of them: a new one beyond closes the oldest (one that is only draining
  first), so a flood of sockets costs file descriptors that stay bounded and a real
  client, which sends its head within milliseconds of connecting, still gets through.
- A closed connection is shut for writing first and drained for :data:`LINGER_S`, so a
  client that has not read its error reply yet is not reset before it can.
"""

from __future__ import annotations

import contextlib
import logging
import math
import selectors
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from app.server.config import ServerConfig
from app.server.errors import ApiError, bad_request, unavailable

log = logging.getLogger(__name__)

MAX_REQUEST_LINE = 8 * 1024  # llama-server's (cpp-httplib's) URI bound
MAX_HEAD = 64 * 1024  # request line and headers together
LINGER_S = 2.0  # a closing connection's unread input is drained this long at most
RECV_BYTES = 64 * 1024
TOKEN_START = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")
TLS_HANDSHAKE = 0x16  # the first byte of a TLS record carrying a ClientHello


class Conn:
    """One client connection and what has been read from it but not yet parsed."""

    __slots__ = (
        "address",
        "buffer",
        "clock",
        "deadline",
        "draining",
        "receiving",
        "since",
        "sock",
    )

    def __init__(self, sock: socket.socket, address: Any, deadline: float) -> None:
        self.sock = sock
        self.address = address
        self.buffer = bytearray()
        self.deadline = deadline  # monotonic: closed if still waiting then
        self.since = time.monotonic()  # when it began to wait (the oldest is evicted first)
        self.clock = True  # the head deadline runs (False: idle after a reply)
        self.draining = False  # shut for writing, read to the end or LINGER_S
        self.receiving: float | None = None  # since when its thread reads a body

    @property
    def name(self) -> str:
        return str(self.address[0]) if isinstance(self.address, tuple) else str(self.address)


def head_end(buffer: bytes | bytearray) -> int:
    """The offset just past the blank line that ends a request head, or -1."""
    ends = [i + 3 for i in (buffer.find(b"\n\r\n"),) if i >= 0]
    ends += [i + 2 for i in (buffer.find(b"\n\n"),) if i >= 0]
    return min(ends) if ends else -1


class ConnReader:
    """A handler's ``rfile``: the bytes read ahead first, then the socket, all of it within
    ``deadline`` (monotonic; the transport has read the head, so this bounds the body)."""

    def __init__(self, conn: Conn) -> None:
        self.conn = conn
        self.deadline = math.inf

    def _fill(self) -> bool:
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("the request did not arrive in time")
        sock = self.conn.sock
        previous = sock.gettimeout()
        sock.settimeout(min(remaining, 3600.0))
        try:
            data = sock.recv(RECV_BYTES)
        finally:
            sock.settimeout(previous)
        if not data:
            return False
        self.conn.buffer += data
        return True

    def _take(self, n: int) -> bytes:
        buffer = self.conn.buffer
        data = bytes(buffer[:n])
        del buffer[:n]
        return data

    def readline(self, limit: int = -1) -> bytes:
        buffer = self.conn.buffer
        while True:
            newline = buffer.find(b"\n")
            if newline >= 0 and (limit < 0 or newline < limit):
                return self._take(newline + 1)
            if 0 <= limit <= len(buffer):
                return self._take(limit)
            if not self._fill():
                return self._take(len(buffer))

    def read(self, n: int = -1) -> bytes:
        """A body: while it arrives, the transport may end this connection to make room
        for a new request (see ``Transport._make_room``)."""
        self.conn.receiving = time.monotonic()
        try:
            while (n < 0 or len(self.conn.buffer) < n) and self._fill():
                pass
        finally:
            self.conn.receiving = None
        return self._take(len(self.conn.buffer) if n < 0 else n)


class ConnWriter:
    """A handler's ``wfile``: unbuffered (a stream's events go out as they are written)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock

    def write(self, data: bytes) -> int:
        self.sock.sendall(data)
        return len(data)

    def flush(self) -> None:
        pass


class Transport:
    """Listens, waits for request heads and hands each complete one to ``answer`` on a
    thread of its own; ``answer(conn)`` says whether the connection stays open.

    The socketserver-like surface (``serve_forever``, ``shutdown``, ``server_close``,
    ``server_address``) is what :class:`ServerRunner` and the window's controller call."""

    def __init__(self, config: ServerConfig, answer: Callable[[Conn], bool]) -> None:
        self.config = config
        self._answer = answer
        host = config.host.strip("[]")
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._listener = socket.socket(family, socket.SOCK_STREAM)
        try:
            self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self._listener.bind((host, config.port))
            self._listener.listen(1024)  # a burst of connects must not wait for SYN retries
            self._listener.setblocking(False)
        except OSError:
            self._listener.close()
            raise
        self.server_address = self._listener.getsockname()
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._selector.register(self._listener, selectors.EVENT_READ, None)
        self._selector.register(self._wake_r, selectors.EVENT_READ, None)
        self._waiting: set[Conn] = set()  # the selector thread's only
        self._lock = threading.Lock()
        self._active: set[Conn] = set()  # guarded by _lock
        self._returned: list[tuple[Conn, bool]] = []  # guarded by _lock
        self._closing = False  # guarded by _lock
        self._stop = False
        self._running = threading.Event()
        self._done = threading.Event()
        self._done.set()

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    @property
    def answering(self) -> int:
        """Requests being answered now (what ``max_connections`` bounds)."""
        with self._lock:
            return len(self._active)

    @property
    def pending(self) -> int:
        """Connections waiting in the selector (what ``max_pending`` bounds)."""
        return len(self._waiting)

    # ---------------------------------------------------------------- the loop

    def serve_forever(self, poll_interval: float = 0.5) -> None:
        self._done.clear()
        self._running.set()
        try:
            while not self._stop:
                timeout = poll_interval
                if self._waiting:
                    soonest = min(conn.deadline for conn in self._waiting)
                    timeout = max(0.0, min(timeout, soonest - time.monotonic()))
                for key, _ in self._selector.select(timeout):
                    if key.fileobj is self._listener:
                        self._accept()
                    elif key.fileobj is self._wake_r:
                        self._take_returned()
                    else:
                        self._readable(key.data)
                self._expire()
        finally:
            self._running.clear()
            self._done.set()

    def shutdown(self) -> None:
        """Stop ``serve_forever`` and wait until it has returned."""
        self._stop = True
        self._wake()
        if self._running.is_set():
            self._done.wait()

    def server_close(self) -> None:
        self._stop = True
        self._wake()
        self._done.wait(5.0)
        with contextlib.suppress(OSError, KeyError, ValueError):
            self._selector.unregister(self._listener)
        self._listener.close()

    def close_connections(self) -> None:
        """End every connection (after ``shutdown``): a keep-alive client must not go on
        being served by a stopped server, and a reply in progress sees its client gone
        and frees its sequence."""
        self._stop = True  # the selector thread owns the waiting ones until it has stopped
        self._wake()
        self._done.wait(5.0)
        with self._lock:
            self._closing = True
            active = list(self._active)
            returned = [conn for conn, _ in self._returned]
            self._returned.clear()
        for conn in active:
            with contextlib.suppress(OSError):
                conn.sock.shutdown(socket.SHUT_RDWR)
        for conn in [*self._waiting, *returned]:
            self._close(conn)
        self._waiting.clear()
        with contextlib.suppress(OSError):
            self._selector.close()
        self._wake_r.close()
        self._wake_w.close()

    def _wake(self) -> None:
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")

    # ---------------------------------------------------------------- the selector thread

    def _accept(self) -> None:
        while True:
            try:
                sock, address = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:  # out of file descriptors: make room, try again later
                log.warning("cannot accept a connection: %s", exc.strerror or exc)
                self._evict()
                return
            sock.setblocking(False)
            with contextlib.suppress(OSError):
                # A reply's head and body (and each stream event) go out at once, not
                # after the client's delayed ACK (~40 ms a keep-alive reply before).
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if len(self._waiting) >= self.config.max_pending:
                self._evict()
            self._wait(Conn(sock, address, time.monotonic() + self.config.head_timeout_s))

    def _wait(self, conn: Conn) -> None:
        try:
            self._selector.register(conn.sock, selectors.EVENT_READ, conn)
        except (OSError, ValueError, KeyError):
            self._close(conn)
            return
        self._waiting.add(conn)

    def _unwait(self, conn: Conn) -> None:
        self._waiting.discard(conn)
        with contextlib.suppress(OSError, ValueError, KeyError):
            self._selector.unregister(conn.sock)

    def _evict(self) -> None:
        """Close the waiting connection that matters least: a draining one, else the one
        that has waited longest."""
        if not self._waiting:
            return
        victim = min(self._waiting, key=lambda c: (not c.draining, c.since))
        if not victim.draining:
            log.debug("%s: closed to make room (%d connections waiting)", victim.name, self.pending)
        self._unwait(victim)
        self._close(victim)

    def _readable(self, conn: Conn) -> None:
        try:
            data = conn.sock.recv(RECV_BYTES)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self._unwait(conn)
            self._close(conn)
            return
        if conn.draining:
            return
        if not conn.clock:  # the first byte after a keep-alive pause starts the head clock
            conn.clock = True
            conn.deadline = time.monotonic() + self.config.head_timeout_s
        conn.buffer += data
        self._examine(conn)

    def _examine(self, conn: Conn) -> None:
        buffer = conn.buffer
        blank = len(buffer) - len(buffer.lstrip(b"\r\n"))  # empty lines before a request
        if blank:
            del buffer[:blank]
        if not buffer:
            return
        if buffer[0] == TLS_HANDSHAKE:
            self._refuse(
                conn,
                bad_request(
                    "This server speaks plain HTTP: use an http:// address, not https://.",
                    code="tls_not_supported",
                ),
            )
            return
        if buffer[0] not in TOKEN_START:
            self._refuse(conn, bad_request("This is not an HTTP request.", code="bad_request"))
            return
        line_end = buffer.find(b"\n")
        if line_end > MAX_REQUEST_LINE or (line_end < 0 and len(buffer) > MAX_REQUEST_LINE):
            self._refuse(
                conn,
                ApiError(
                    414,
                    f"The request line is longer than {MAX_REQUEST_LINE:,} bytes.",
                    code="uri_too_long",
                ),
            )
            return
        end = head_end(buffer)
        if end > MAX_HEAD or (end < 0 and len(buffer) > MAX_HEAD):
            self._refuse(
                conn,
                ApiError(
                    431,
                    f"The request headers are larger than {MAX_HEAD:,} bytes.",
                    code="headers_too_large",
                ),
            )
            return
        if end >= 0:
            self._unwait(conn)
            self._start(conn)

    def _start(self, conn: Conn) -> None:
        with self._lock:
            full = len(self._active) >= self.config.max_connections and not self._make_room()
            if not full:
                self._active.add(conn)
        if full:
            self._refuse(
                conn,
                unavailable(
                    f"Too many requests at once (at most {self.config.max_connections}); "
                    "retry shortly.",
                    "too_many_connections",
                ),
            )
            return
        try:
            conn.sock.setblocking(True)
            conn.sock.settimeout(self.config.idle_timeout_s)  # a send may block this long
            thread = threading.Thread(target=self._work, args=(conn,), name="api-request")
            thread.daemon = True
            thread.start()
        except (OSError, RuntimeError) as exc:  # no thread to be had
            log.warning("cannot answer %s: %s", conn.name, exc)
            with self._lock:
                self._active.discard(conn)
            self._close(conn)

    def _make_room(self) -> bool:
        """With every thread taken, end the request that has been sending its body the
        longest (a real client's body takes milliseconds; one trickled within its deadline
        would otherwise hold a thread for a minute): its thread sees the body end and
        stops. Whether one was ended (under ``_lock``)."""
        uploads = [(c.receiving, c) for c in self._active if c.receiving is not None]
        if not uploads:
            return False
        since, victim = min(uploads, key=lambda pair: pair[0] or 0.0)
        log.info(
            "%s: its body, %.1f s under way, was cut to make room for another request",
            victim.name,
            time.monotonic() - (since or 0.0),
        )
        victim.receiving = None
        with contextlib.suppress(OSError):
            victim.sock.shutdown(socket.SHUT_RDWR)
        return True

    def _refuse(self, conn: Conn, error: ApiError) -> None:
        """Send ``error`` (best effort: it fits a socket buffer) and close."""
        self._unwait(conn)
        log.info("%s: %d %s", conn.name, error.status, error.message)
        with contextlib.suppress(OSError):
            conn.sock.setblocking(False)
            conn.sock.send(error.response())
        self._drain(conn)

    def _drain(self, conn: Conn) -> None:
        with contextlib.suppress(OSError):
            conn.sock.shutdown(socket.SHUT_WR)
        conn.buffer.clear()
        conn.draining = True
        conn.deadline = time.monotonic() + LINGER_S
        conn.since = time.monotonic()
        self._wait(conn)

    def _expire(self) -> None:
        now = time.monotonic()
        for conn in [c for c in self._waiting if c.deadline <= now]:
            if conn.draining or not conn.clock:
                self._unwait(conn)
                self._close(conn)
            elif not conn.buffer:  # connected and sent nothing
                log.debug(
                    "%s: sent no request in %.0f s; closed", conn.name, self.config.head_timeout_s
                )
                self._unwait(conn)
                self._close(conn)
            else:
                self._refuse(
                    conn,
                    ApiError(
                        408,
                        f"The request head did not arrive within {self.config.head_timeout_s:g} s.",
                        code="request_timeout",
                    ),
                )

    def _take_returned(self) -> None:
        with contextlib.suppress(OSError):
            while self._wake_r.recv(4096):
                pass
        with self._lock:
            returned = list(self._returned)
            self._returned.clear()
        now = time.monotonic()
        for conn, keep in returned:
            try:
                conn.sock.setblocking(False)
            except OSError:
                self._close(conn)
                continue
            if not keep:
                self._drain(conn)
                continue
            conn.since = now
            if conn.buffer:  # a pipelined request already read
                conn.clock = True
                conn.deadline = now + self.config.head_timeout_s
            else:
                conn.clock = False
                conn.deadline = now + self.config.idle_timeout_s
            if len(self._waiting) >= self.config.max_pending:
                self._evict()
            self._wait(conn)
            if conn.buffer:
                self._examine(conn)

    @staticmethod
    def _close(conn: Conn) -> None:
        with contextlib.suppress(OSError):
            conn.sock.close()

    # ---------------------------------------------------------------- answering threads

    def _work(self, conn: Conn) -> None:
        keep = False
        try:
            keep = self._answer(conn)
        except OSError as exc:  # the client went away outside a request's own handling
            log.info("%s: connection ended (%s)", conn.name, exc.strerror or type(exc).__name__)
        except Exception:
            log.exception("%s: the request could not be answered", conn.name)
        finally:
            with self._lock:
                self._active.discard(conn)
                closing = self._closing
                if not closing:
                    self._returned.append((conn, keep))
            if closing:
                self._close(conn)
            else:
                self._wake()
