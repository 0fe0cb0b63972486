"""The probe against llama.cpp's own ``ggml-rpc-server`` (the RPC_SERVER peer): giving up on
a busy worker must not kill it (it serves one client at a time and dies of SIGPIPE when it
answers a client that has closed)."""

from __future__ import annotations

import socket
import struct
import subprocess
import time
from collections.abc import Iterator

import pytest

from app.engine.rpc_probe import CMD_HELLO, CONN_CAPS_SIZE, RpcProbeError, probe
from tests.devices.conftest import free_port
from tests.support.peers import RPC_SERVER


@pytest.fixture
def rpc_server() -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    if not RPC_SERVER.exists():
        pytest.fail(f"{RPC_SERVER} is not built: run `python -m tests.support.peers` first.")
    port = free_port()
    proc = subprocess.Popen(
        [str(RPC_SERVER), "-H", "127.0.0.1", "-p", str(port), "-t", "1"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    endpoint = f"127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            probe(endpoint, timeout_s=5)
            break
        except RpcProbeError:
            assert proc.poll() is None, "ggml-rpc-server exited at start"
            assert time.monotonic() < deadline, "ggml-rpc-server did not start"
            time.sleep(0.2)
    yield proc, endpoint
    proc.kill()
    proc.wait(10)


def _hold(port: int) -> socket.socket:
    """A client the server is serving: the HELLO exchanged, the connection kept open."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    sock.sendall(struct.pack("<BQ", CMD_HELLO, CONN_CAPS_SIZE) + bytes(CONN_CAPS_SIZE))
    reply = b""
    while len(reply) < 8 + 4 + CONN_CAPS_SIZE:
        chunk = sock.recv(64)
        assert chunk, "the server closed the holding connection"
        reply += chunk
    return sock


def test_giving_up_on_a_busy_worker_leaves_it_alive(
    rpc_server: tuple[subprocess.Popen[bytes], str],
) -> None:
    proc, endpoint = rpc_server
    port = int(endpoint.rsplit(":", 1)[1])
    for _ in range(3):  # each round: a busy worker, a probe that gives up, the worker freed
        holder = _hold(port)
        with pytest.raises(RpcProbeError, match="busy serving another client"):
            probe(endpoint, timeout_s=0.5)
        holder.close()  # the server now takes the probe's connection from its queue
        # it must answer the next client; a SIGPIPE would have ended it instead
        info = probe(endpoint, timeout_s=30)
        assert info.devices and proc.poll() is None
    time.sleep(0.3)
    assert proc.poll() is None, f"ggml-rpc-server died (exit {proc.returncode})"
