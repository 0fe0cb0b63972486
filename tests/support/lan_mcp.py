"""The test MCP server reached over plain ``http://`` at this machine's own network
address (not the loopback): what an MCP server on another computer looks like to the
app, with no packet leaving the machine."""

from __future__ import annotations

import socket
from contextlib import AbstractContextManager

import pytest

from tests.mcp.servers import http_test_server


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


def lan_mcp_server() -> AbstractContextManager[str]:
    """The test MCP server on this machine's network address; yields its URL."""
    return http_test_server(lan_address())
