"""The test MCP server reached over plain ``http://`` at this machine's own network
address (not the loopback): what an MCP server on another computer looks like to the
app, with no packet leaving the machine."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from tests.mcp.servers import SERVER_SCRIPT


def lan_address() -> str:
    """This machine's non-loopback IPv4 address (a UDP socket's source address: nothing
    is sent); the test is skipped on a machine that has none."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))
            address = str(probe.getsockname()[0])
        except OSError:
            address = ""
    if not address or address.startswith("127.") or address == "0.0.0.0":
        pytest.skip("this machine has no network address other than the loopback")
    return address


@contextmanager
def lan_mcp_server() -> Iterator[str]:
    """The test MCP server on this machine's network address; yields its URL."""
    address = lan_address()
    with socket.socket() as s:
        s.bind((address, 0))
        port = int(s.getsockname()[1])
    child = subprocess.Popen(
        [sys.executable, str(SERVER_SCRIPT), "http", str(port), address],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection((address, port), timeout=0.5).close()
                break
            except OSError:
                if child.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("the test MCP server did not start") from None
                time.sleep(0.1)
        yield f"http://{address}:{port}/mcp"
    finally:
        child.terminate()
        try:
            child.wait(5)
        except subprocess.TimeoutExpired:  # uvicorn waits for open streams to close
            child.kill()
            child.wait(5)
