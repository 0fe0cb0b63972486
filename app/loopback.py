"""Whether a host is this computer's loopback: the one rule every place that decides uses
(remote engines and MCP servers over plain ``http://``, RPC endpoints, the server's bind
address, its ``Host`` and ``Origin`` checks).

Only what needs no resolving counts: an IP literal in ``127.0.0.0/8`` or ``::1`` (an
IPv4-mapped ``::ffff:127.x.y.z`` too), and the exact name ``localhost`` (with or without
its trailing dot), which RFC 6761 reserves and every system resolver answers from its own
hosts file. Any other name - ``gpu.localhost`` and ``localhost.example`` included - is
*not* loopback: deciding so would take a DNS lookup, which can go out to the network and
be answered with any address, and then a key would follow over plain ``http://``. Such a
name needs the same confirmation as another computer.
"""

from __future__ import annotations

import ipaddress

__all__ = ["is_loopback_host", "url_host_is_loopback"]

LOCALHOST_NAMES = frozenset({"localhost", "localhost."})


def is_loopback_host(host: str) -> bool:
    """Whether ``host`` (a name or an IP literal, brackets allowed) is this computer's
    loopback without resolving anything (see the module docstring)."""
    name = host.strip().lower()
    if name.startswith("[") and name.endswith("]"):
        name = name[1:-1]
    if name in LOCALHOST_NAMES:
        return True
    try:
        address = ipaddress.ip_address(name.partition("%")[0])  # an IPv6 zone is no part
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped.is_loopback
    return address.is_loopback


def url_host_is_loopback(url: str) -> bool:
    """Whether the host of ``url`` (``http://127.0.0.1:8080/v1``) is loopback; False for
    a URL that has no host or cannot be parsed."""
    from urllib.parse import urlsplit

    try:
        host = urlsplit(url.strip()).hostname
    except ValueError:
        return False
    return bool(host) and is_loopback_host(host or "")
