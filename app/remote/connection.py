"""Where a remote engine connects: the server's URL, its key, the model, the time limits.

A :class:`RemoteConnection` is checked before anything is sent (:meth:`validate`): an
``http://`` URL to anything but this computer's loopback (:mod:`app.loopback`) needs ``allow_insecure`` (the
API key and every message would travel in clear), the command line's
``--remote-allow-insecure-http``.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

from app.errors import LlamaDeskError
from app.loopback import is_loopback_host

INSECURE_FLAG = "--remote-allow-insecure-http"

CONNECT_TIMEOUT_S = 10.0  # a server that does not accept the connection: down or unreachable
READ_TIMEOUT_S = 300.0  # between two pieces of the stream: a long prompt may take a while
PROBE_TIMEOUT_S = 10.0  # each of the probe's small requests
MAX_RETRY_AFTER_S = 10.0  # a 429's Retry-After is waited out up to this long, once


class RemoteConnectionError(LlamaDeskError):
    """The connection's settings are wrong (before anything is sent)."""


@dataclass(frozen=True)
class RemoteConnection:
    """See the module docstring. ``base_url`` is the server's root (``/v1`` at its end is
    taken off: the probe also asks for llama-server's routes beside it)."""

    base_url: str
    api_key: str | None = None
    model: str | None = None  # None: the server's first (or only) model
    allow_insecure: bool = False
    connect_timeout_s: float = CONNECT_TIMEOUT_S
    read_timeout_s: float = READ_TIMEOUT_S
    max_retry_after_s: float = MAX_RETRY_AFTER_S

    @property
    def root(self) -> str:
        url = self.base_url.strip().rstrip("/")
        return url.removesuffix("/v1").rstrip("/")

    @property
    def host(self) -> str:
        return urlsplit(self.root).hostname or ""

    @property
    def label(self) -> str:
        """The machine that answers, as a conversation says it ("gpu-box:8080")."""
        parts = urlsplit(self.root)
        return parts.netloc.rpartition("@")[2] or self.root

    @property
    def shown_root(self) -> str:
        """:attr:`root` without a ``user:password@`` (what may be shown to others)."""
        parts = urlsplit(self.root)
        return parts._replace(netloc=parts.netloc.rpartition("@")[2]).geturl()

    def validate(self) -> None:
        """Raise :class:`RemoteConnectionError` with a sentence for a URL that cannot be used."""
        parts = urlsplit(self.root)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise RemoteConnectionError(
                f"{self.base_url!r} is not a server address: give one like "
                "http://127.0.0.1:8080 or https://gpu-box.example:8443."
            )
        try:
            parts.port  # noqa: B018 (raises on a port that is no number)
        except ValueError:
            raise RemoteConnectionError(f"The port in {self.base_url!r} is not a number.") from None
        if (
            parts.scheme == "http"
            and not is_loopback_host(parts.hostname)
            and not self.allow_insecure
        ):
            raise RemoteConnectionError(
                f"{self.root} is plain http:// to another computer: the API key and every "
                "message would travel unencrypted. Use https://, or confirm with "
                f"{INSECURE_FLAG} that this network is trusted."
            )
        if self.api_key is not None and not self.api_key.strip():
            raise RemoteConnectionError("The API key is empty: leave it out or give the key.")
        for name, value in (
            ("connect timeout", self.connect_timeout_s),
            ("read timeout", self.read_timeout_s),
        ):
            if not value > 0:
                raise RemoteConnectionError(f"The {name} must be more than 0 seconds.")

    def headers(self) -> dict[str, str]:
        """What every request carries. Never ``X-Conversation-Id``: llama-server takes it
        for a resumable stream that keeps generating after a disconnect."""
        headers = {"Accept": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key.strip()}"
        return headers
