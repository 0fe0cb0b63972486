"""The pure-Python RPC probe: a real socket against real local peers (a dead port, a peer
that is not an RPC server, one that accepts and never answers, one that speaks the
protocol as ggml-rpc.cpp frames it), each a sentence within its timeout."""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from app.engine.rpc_probe import (
    CMD_DEVICE_COUNT,
    CMD_GET_DEVICE_MEMORY,
    CMD_HELLO,
    CONN_CAPS_SIZE,
    RpcProbeError,
    parse_endpoint,
    parse_endpoints,
    probe,
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _serve(handler: Callable[[socket.socket], None]) -> Iterator[int]:
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", 0))
    server.listen(4)
    port = int(server.getsockname()[1])
    stop = threading.Event()

    def loop() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            with conn:
                handler(conn)

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    yield port
    stop.set()
    thread.join(5)
    server.close()


def _recv(conn: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = conn.recv(n - len(data))
        if not chunk:
            raise ConnectionError
        data += chunk
    return data


def _rpc_like(version: tuple[int, int, int], n_devices: int) -> Callable[[socket.socket], None]:
    """A peer that frames replies exactly as ggml-rpc.cpp's server does."""

    def handle(conn: socket.socket) -> None:
        try:
            while True:
                cmd, size = struct.unpack("<BQ", _recv(conn, 9))
                payload = _recv(conn, size)
                if cmd == CMD_HELLO:
                    assert payload == bytes(CONN_CAPS_SIZE)
                    reply = bytes((*version, 0)) + bytes(CONN_CAPS_SIZE)
                elif cmd == CMD_DEVICE_COUNT:
                    reply = struct.pack("<I", n_devices)
                elif cmd == CMD_GET_DEVICE_MEMORY:
                    (index,) = struct.unpack("<I", payload)
                    reply = struct.pack("<QQ", (index + 1) * 2**30, 8 * 2**30)
                else:
                    return
                conn.sendall(struct.pack("<Q", len(reply)) + reply)
        except ConnectionError:
            return

    return handle


@pytest.fixture
def rpc_like() -> Iterator[int]:
    yield from _serve(_rpc_like((7, 0, 0), 2))


def test_a_peer_speaking_the_protocol_reports_its_devices(rpc_like: int) -> None:
    info = probe(f"127.0.0.1:{rpc_like}", timeout_s=5)
    assert info.version == (7, 0, 0)
    assert [(m.free_bytes, m.total_bytes) for m in info.devices] == [
        (2**30, 8 * 2**30),
        (2 * 2**30, 8 * 2**30),
    ]


def test_another_protocol_version_is_refused_with_a_sentence() -> None:
    for port in _serve(_rpc_like((6, 1, 0), 1)):
        with pytest.raises(RpcProbeError, match=r"protocol 6\.1\.0.*same LlamaDesk"):
            probe(f"127.0.0.1:{port}", timeout_s=5)


def test_a_dead_port_says_nothing_listens() -> None:
    port = _free_port()
    t0 = time.monotonic()
    with pytest.raises(RpcProbeError, match=r"Nothing listens on 127\.0\.0\.1:\d+.*rpc-worker"):
        probe(f"127.0.0.1:{port}", timeout_s=30)
    # the refusal is taken at its word, not waited out (bounded for a busy machine)
    assert time.monotonic() - t0 < 15


def test_a_server_of_another_protocol_is_not_an_rpc_server() -> None:
    def http(conn: socket.socket) -> None:
        conn.recv(100)
        conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")

    for port in _serve(http):
        with pytest.raises(RpcProbeError, match=r"not a llama\.cpp RPC server"):
            probe(f"127.0.0.1:{port}", timeout_s=3)


def test_a_peer_that_closes_at_once_is_not_an_rpc_server() -> None:
    for port in _serve(lambda conn: None):
        with pytest.raises(RpcProbeError, match="closed the connection"):
            probe(f"127.0.0.1:{port}", timeout_s=3)


def test_a_hung_peer_is_given_up_within_the_timeout() -> None:
    release = threading.Event()

    def hang(conn: socket.socket) -> None:
        release.wait(60)

    for port in _serve(hang):
        t0 = time.monotonic()
        with pytest.raises(RpcProbeError, match=r"did not answer.*within 1 s.*busy"):
            probe(f"127.0.0.1:{port}", timeout_s=1)
        elapsed = time.monotonic() - t0
        release.set()
        # not before the timeout; well before the peer's 60 s (bounded for a busy machine)
        assert 0.9 < elapsed < 20


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("localhost", "HOST:PORT"),
        (":50052", "HOST:PORT"),
        ("[::1]:50052", "IPv6"),
        ("::1:50052", "IPv6"),
        ("http://127.0.0.1:50052", "without a URL scheme .*give 127.0.0.1:50052[.]"),
        ("127.0.0.1:50052:1", "trailing ':1' .*device index.*give 127.0.0.1:50052[.]"),
        ("host:0", "1 to 65535"),
        ("host:port", "1 to 65535"),
        ("host:70000", "1 to 65535"),
    ],
)
def test_bad_endpoints_are_sentences(text: str, message: str) -> None:
    with pytest.raises(RpcProbeError, match=message):
        parse_endpoint(text)


def test_endpoint_lists() -> None:
    assert [str(e) for e in parse_endpoints("a:1, b:2,")] == ["a:1", "b:2"]
    assert parse_endpoint("127.0.0.1:5").is_loopback
    assert parse_endpoint("localhost:5").is_loopback
    assert not parse_endpoint("10.0.0.2:5").is_loopback
    with pytest.raises(RpcProbeError, match="twice"):
        parse_endpoints("a:1,a:1")


@pytest.mark.parametrize(
    ("endpoint", "said"),
    [
        ("http://127.0.0.1:50052", "without a URL scheme"),
        ("127.0.0.1:50052:1", "the trailing ':1' is not part of an RPC endpoint"),
    ],
)
def test_run_rpc_says_what_is_wrong_with_the_endpoint(
    endpoint: str, said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from app.cli import main

    assert main(["run", "model.gguf", "hi", "--rpc", endpoint]) == 2
    err = capsys.readouterr().err
    assert said in err and "give 127.0.0.1:50052." in err and "IPv6" not in err
