"""Ask an RPC endpoint who it is, in pure Python, before llama.cpp ever connects to it.

llama.cpp's RPC client aborts the whole process on any connection or protocol error and
its sockets have no timeouts (a hung peer blocks a decode for ever). So every endpoint is
first probed here with a socket timeout: the HELLO handshake, the device count and each
device's memory, exactly as ``ggml/src/ggml-rpc/ggml-rpc.cpp`` (protocol 7.0.0 in
llama-cpp-python 0.3.36) frames them:

- request: ``u8 command | u64 payload size | payload``;
- reply: ``u64 payload size | payload`` (little-endian, structs packed).

A dead, busy (the server serves one client at a time: a second one waits unanswered),
hung or wrong endpoint becomes an :class:`RpcProbeError` sentence. The probe closes its
connection, after which the server accepts the next client.

Standard library only: nothing here loads llama.cpp.
"""

from __future__ import annotations

import ipaddress
import socket
import struct
import time
from dataclasses import dataclass

from app.engine.errors import EngineError
from app.loopback import is_loopback_host

# ggml-rpc.cpp's enum rpc_cmd (RPC_CMD_HELLO is fixed at 14 by a static_assert there).
CMD_GET_DEVICE_MEMORY = 11
CMD_HELLO = 14
CMD_DEVICE_COUNT = 15
CONN_CAPS_SIZE = 24  # transport.h: RPC_CONN_CAPS_SIZE; all zero = plain TCP, no upgrade
PROTOCOL_MAJOR = 7  # ggml-rpc.h: RPC_PROTO_MAJOR_VERSION of the bundled llama.cpp
PROTOCOL_MINOR = 0
DEFAULT_PORT = 50052  # ggml-rpc-server's default
DEFAULT_TIMEOUT_S = 5.0
# A server never has more than this many devices; a larger count means a wrong peer.
_MAX_DEVICES = 64


class RpcProbeError(EngineError):
    """An endpoint that cannot be used: the message says why, in one sentence."""


@dataclass(frozen=True)
class Endpoint:
    """``host:port`` as llama.cpp parses it (split at the first ``:``, so no IPv6 literal)."""

    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def is_loopback(self) -> bool:
        return is_loopback_host(self.host)


@dataclass(frozen=True)
class RemoteMemory:
    free_bytes: int
    total_bytes: int


@dataclass(frozen=True)
class RpcServerInfo:
    """What a probed endpoint said: its protocol version and each device's memory."""

    endpoint: Endpoint
    version: tuple[int, int, int]
    devices: tuple[RemoteMemory, ...]
    elapsed_s: float


def parse_endpoint(text: str) -> Endpoint:
    """``HOST:PORT`` checked the way llama.cpp will read it, or a sentence why not."""
    value = text.strip()
    example = f"e.g. 127.0.0.1:{DEFAULT_PORT}"
    scheme, has_scheme, rest = value.partition("://")
    if has_scheme:
        # llama.cpp's RPC is raw TCP: a URL (often pasted from a server's address) is not
        # an endpoint; name the HOST:PORT inside it when there is one
        inner = rest.split("/", 1)[0]
        hint = inner if inner.count(":") == 1 and inner[0] != "[" else f"HOST:PORT, {example}"
        raise RpcProbeError(
            f"{text!r}: an RPC endpoint is HOST:PORT without a URL scheme "
            f"({scheme}:// is not used; RPC is plain TCP): give {hint}."
        )
    if value.startswith("[") or _is_ipv6(value) or _is_ipv6(value.rpartition(":")[0]):
        raise RpcProbeError(
            f"{text!r}: llama.cpp splits an endpoint at its first ':', so an IPv6 address "
            "cannot be used; give a host name or an IPv4 address."
        )
    host, sep, port_text = value.partition(":")
    if not sep or not host:
        raise RpcProbeError(f"{text!r} is not an RPC endpoint: write it as HOST:PORT, {example}.")
    port_text, extra, tail = port_text.partition(":")
    if extra:
        # HOST:PORT:N: newer llama.cpp names one device of a worker so; this one has no
        # such suffix (it uses every device the worker offers)
        raise RpcProbeError(
            f"{text!r}: the trailing ':{tail}' is not part of an RPC endpoint (this llama.cpp "
            f"has no device index there and uses every device of a worker): give {host}:{port_text}."
            if tail.isdigit() and port_text.isdigit()
            else f"{text!r} is not an RPC endpoint: write it as HOST:PORT, {example}."
        )
    if not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
        raise RpcProbeError(f"{text!r}: the port must be a number from 1 to 65535.")
    return Endpoint(host, int(port_text))


def _is_ipv6(text: str) -> bool:
    try:
        return ipaddress.ip_address(text).version == 6
    except ValueError:
        return False


def parse_endpoints(text: str) -> tuple[Endpoint, ...]:
    """A comma-separated list (``--rpc a:1,b:2``), duplicates refused."""
    parts = [p for p in (s.strip() for s in text.split(",")) if p]
    endpoints = tuple(parse_endpoint(p) for p in parts)
    if len(set(endpoints)) != len(endpoints):
        raise RpcProbeError(f"{text!r} names the same endpoint twice.")
    return endpoints


def _closed(endpoint: Endpoint) -> RpcProbeError:
    return RpcProbeError(
        f"{endpoint} closed the connection during the RPC handshake: it is not a "
        "llama.cpp RPC server, or one of another protocol version."
    )


def _recv_exact(sock: socket.socket, n: int, endpoint: Endpoint) -> bytes:
    chunks: list[bytes] = []
    remaining = n
    while remaining:
        chunk = sock.recv(remaining)
        if not chunk:
            raise _closed(endpoint)
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def _call(
    sock: socket.socket, endpoint: Endpoint, command: int, payload: bytes, reply_size: int
) -> bytes:
    sock.sendall(struct.pack("<BQ", command, len(payload)) + payload)
    (size,) = struct.unpack("<Q", _recv_exact(sock, 8, endpoint))
    if size != reply_size:
        raise RpcProbeError(
            f"{endpoint} answered the RPC handshake with {size} bytes where {reply_size} were "
            "expected: it is not a llama.cpp RPC server of this version."
        )
    return _recv_exact(sock, reply_size, endpoint)


def probe(text_or_endpoint: str | Endpoint, timeout_s: float = DEFAULT_TIMEOUT_S) -> RpcServerInfo:
    """Connect, handshake, count the devices and read their memory, within ``timeout_s``
    for each step; raise :class:`RpcProbeError` with a sentence on any failure."""
    endpoint = (
        text_or_endpoint
        if isinstance(text_or_endpoint, Endpoint)
        else parse_endpoint(text_or_endpoint)
    )
    t0 = time.monotonic()
    try:
        sock = socket.create_connection((endpoint.host, endpoint.port), timeout=timeout_s)
    except TimeoutError:
        raise RpcProbeError(
            f"No answer from {endpoint} within {timeout_s:g} s: the machine is off, "
            "unreachable or a firewall drops the connection."
        ) from None
    except ConnectionRefusedError:
        raise RpcProbeError(
            f"Nothing listens on {endpoint}: start `llamadesk rpc-worker --port {endpoint.port}` "
            "on that machine first."
        ) from None
    except OSError as exc:
        raise RpcProbeError(f"Cannot connect to {endpoint}: {exc.strerror or exc}.") from None
    try:
        with sock:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            try:
                version, memories = _exchange(sock, endpoint)
            except BaseException:
                _abort(sock)
                raise
    except TimeoutError:
        raise RpcProbeError(
            f"{endpoint} accepted the connection but did not answer the RPC handshake within "
            f"{timeout_s:g} s: it is busy serving another client (an RPC worker serves one "
            "at a time), hung, or not a llama.cpp RPC server."
        ) from None
    except (ConnectionResetError, BrokenPipeError):
        raise _closed(endpoint) from None  # closed before our request was read: the same
    except OSError as exc:
        raise RpcProbeError(
            f"The connection to {endpoint} failed during the RPC handshake: {exc.strerror or exc}."
        ) from None
    return RpcServerInfo(endpoint, version, memories, time.monotonic() - t0)


def _exchange(
    sock: socket.socket, endpoint: Endpoint
) -> tuple[tuple[int, int, int], tuple[RemoteMemory, ...]]:
    """HELLO, the device count and each device's memory, on a connected socket."""
    hello = _call(sock, endpoint, CMD_HELLO, bytes(CONN_CAPS_SIZE), 4 + CONN_CAPS_SIZE)
    version = (hello[0], hello[1], hello[2])
    if version[0] != PROTOCOL_MAJOR or version[1] > PROTOCOL_MINOR:
        raise RpcProbeError(
            f"{endpoint} speaks RPC protocol {'.'.join(map(str, version))}, this "
            f"LlamaDesk {PROTOCOL_MAJOR}.{PROTOCOL_MINOR}: run the same LlamaDesk "
            "version's `llamadesk rpc-worker` there."
        )
    (count,) = struct.unpack("<I", _call(sock, endpoint, CMD_DEVICE_COUNT, b"", 4))
    if not 0 < count <= _MAX_DEVICES:
        raise RpcProbeError(f"{endpoint} reports {count} devices: nothing to use there.")
    memories = []
    for index in range(count):
        free, total = struct.unpack(
            "<QQ", _call(sock, endpoint, CMD_GET_DEVICE_MEMORY, struct.pack("<I", index), 16)
        )
        memories.append(RemoteMemory(int(free), int(total)))
    return version, tuple(memories)


def _abort(sock: socket.socket) -> None:
    """Close with a reset (SO_LINGER 0) instead of a FIN, when giving up mid-exchange.

    A busy worker (it serves one client at a time) has our connection in its accept
    queue with our HELLO already in its buffer. After a plain close it would, once free,
    read that HELLO and send the reply in two writes: the first draws a reset from our
    closed socket, the second gets EPIPE, and the SIGPIPE kills an upstream
    ``ggml-rpc-server`` (it does not ignore the signal). After a reset its first write
    fails with ECONNRESET, which raises no signal, and it goes back to accept."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass  # already closed by the peer: nothing is left to reset
