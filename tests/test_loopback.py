"""One loopback rule for every place that decides (issue 27 item 6): literal loopback
addresses and the exact name ``localhost`` count, no other name does (``*.localhost``
would need a DNS lookup, which may go out and come back with any address)."""

from __future__ import annotations

import pytest

from app.engine.rpc_probe import parse_endpoint
from app.engine.rpc_worker import check_bind
from app.errors import LlamaDeskError
from app.loopback import is_loopback_host, url_host_is_loopback
from app.remote.connection import RemoteConnection, RemoteConnectionError
from app.remote.saved import SavedConnection
from app.server.config import ServerConfig
from app.server.origin import OriginPolicy, Verdict

LOOPBACK = ["127.0.0.1", "127.8.9.10", "::1", "[::1]", "localhost", "LOCALHOST", "localhost."]
NOT_LOOPBACK = [
    "gpu.localhost",
    "evil.localhost",
    "localhost.example.com",
    "127.0.0.1.nip.io",
    "10.0.0.2",
    "0.0.0.0",
    "::",
    "example.com",
    "",
    "127.1",  # inet_aton would read it as 127.0.0.1, but that takes a resolver's rules
]


@pytest.mark.parametrize("host", LOOPBACK)
def test_literal_loopback_counts(host: str) -> None:
    assert is_loopback_host(host)


@pytest.mark.parametrize("host", NOT_LOOPBACK)
def test_names_that_need_resolving_do_not_count(host: str) -> None:
    assert not is_loopback_host(host)


def test_an_ipv4_mapped_loopback_counts() -> None:
    assert is_loopback_host("::ffff:127.0.0.1")
    assert not is_loopback_host("::ffff:10.0.0.1")


def test_url_hosts() -> None:
    assert url_host_is_loopback("http://127.0.0.1:8080/v1")
    assert url_host_is_loopback("http://[::1]:8080/mcp")
    assert not url_host_is_loopback("http://gpu.localhost:8080/mcp")
    assert not url_host_is_loopback("not a url")
    assert not url_host_is_loopback("http://[broken/")


def test_every_decider_uses_the_same_rule() -> None:
    """The remote engine, the saved connection, the RPC endpoint, the server's bind check
    and its origin check all say the same of ``*.localhost`` and of a literal address."""
    with pytest.raises(RemoteConnectionError, match="plain http:// to another computer"):
        RemoteConnection("http://gpu.localhost:8080").validate()
    RemoteConnection("http://127.0.0.2:8080").validate()
    assert SavedConnection("a", "a", "http://gpu.localhost:8080").needs_confirmation
    assert not SavedConnection("a", "a", "http://localhost:8080").needs_confirmation
    assert not parse_endpoint("gpu.localhost:50052").is_loopback
    assert parse_endpoint("127.0.0.3:50052").is_loopback
    with pytest.raises(LlamaDeskError):
        check_bind(parse_endpoint("gpu.localhost:50052"), trusted_network=False)
    with pytest.raises(LlamaDeskError, match="--api-key"):
        ServerConfig(host="gpu.localhost").validate()
    ServerConfig(host="localhost").validate()
    policy = OriginPolicy((), 8080)
    assert policy.judge("http://127.0.0.1:8080", None) is Verdict.SAME_ORIGIN
    assert policy.judge("http://[::1]:8080", None) is Verdict.SAME_ORIGIN
    assert policy.judge("http://gpu.localhost:8080", None) is Verdict.REFUSED
