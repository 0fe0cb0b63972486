"""Which web pages may talk to the server: the ``Origin`` rule, checked before anything
else of a request is looked at (key, body, content type, route).

A browser adds ``Origin`` to every cross-origin request a page makes - also the "simple"
ones (a ``text/plain`` POST) that it sends without a preflight and whose reply it merely
hides from the page. Hiding the reply is no protection for a server whose requests *do*
things (generate, create a conversation, erase or write a slot file), so a request whose
origin is not allowed is refused whole, with a 403, on every route:

- no ``Origin``: allowed (``curl``, SDKs, scripts - no browser page is involved), unless
  the browser says by ``Sec-Fetch-Site`` that another site made it (an ``<img>`` or
  ``<script>`` GET, which carries no ``Origin``);
- the server's own origin on the loopback (``http://127.0.0.1:PORT``, ``localhost``,
  ``[::1]``, this server's port): allowed - it is same-origin by definition (the server
  serves no pages, so no script runs there) and a browser sends it on same-origin POSTs;
- an origin given with ``--cors-origin`` (compared without case and trailing slash):
  allowed, and the reply carries ``Access-Control-Allow-Origin``;
- ``*`` in the list: every origin, ``null`` included;
- ``Origin: null`` (``file://`` pages, sandboxed frames, ``data:`` URLs): refused unless
  ``null`` or ``*`` is listed - a downloaded HTML file must not drive the model;
- anything else: 403.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from urllib.parse import urlsplit

from app.loopback import is_loopback_host

FOREIGN_FETCH_SITES = frozenset({"cross-site", "same-site"})


class Verdict(Enum):
    NO_ORIGIN = "no origin"  # not a browser page
    SAME_ORIGIN = "same origin"  # the server's own loopback origin
    ALLOWED = "allowed"  # a configured CORS origin: reply with Access-Control-Allow-Origin
    REFUSED = "refused"


@dataclass(frozen=True)
class OriginPolicy:
    allowed: tuple[str, ...]  # ServerConfig.cors_origins: (), ("*",), origins, "null"
    port: int  # the port the server listens on

    def judge(self, origin: str | None, fetch_site: str | None) -> Verdict:
        if origin is None:
            site = (fetch_site or "").strip().lower()
            if site in FOREIGN_FETCH_SITES and "*" not in self.allowed:
                return Verdict.REFUSED
            return Verdict.NO_ORIGIN
        wanted = normalize(origin)
        if "*" in self.allowed:
            return Verdict.ALLOWED
        if wanted in {normalize(o) for o in self.allowed}:
            return Verdict.ALLOWED
        if self._is_own(wanted):
            return Verdict.SAME_ORIGIN
        return Verdict.REFUSED

    def allow_origin_header(self, origin: str | None, verdict: Verdict) -> str | None:
        """The ``Access-Control-Allow-Origin`` value, or None for no CORS headers."""
        if verdict is not Verdict.ALLOWED or origin is None:
            return None
        return "*" if "*" in self.allowed else origin

    def _is_own(self, origin: str) -> bool:
        try:
            parts = urlsplit(origin)
            port = parts.port
        except ValueError:
            return False
        if parts.scheme != "http" or parts.path or parts.query:
            return False
        host = (parts.hostname or "").lower()
        return is_loopback_host(host) and (port or 80) == self.port


def normalize(origin: str) -> str:
    return origin.strip().lower().rstrip("/")


def refusal(origin: str | None) -> str:
    """The sentence a refused request gets."""
    if origin is None:
        return (
            "Requests made by web pages of other sites are not allowed on this server "
            "(start it with --cors-origin '*' to allow every page)."
        )
    if normalize(origin) == "null":
        return (
            "Requests from pages without an origin (local files, sandboxed frames) are not "
            "allowed on this server (start it with --cors-origin null to allow them)."
        )
    return (
        f"Requests from web pages at {origin[:200]} are not allowed on this server "
        f"(start it with --cors-origin {origin[:200]} to allow them)."
    )
