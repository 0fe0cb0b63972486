"""What can go wrong on the wire, as one sentence each, and which failures may be retried.

A :class:`RemoteFault` is the typed error a remote turn ends with (the session turns it
into ``TurnFailed`` for that conversation only); :func:`status_fault` and
:func:`transport_fault` make one from an HTTP status or an httpx2 exception. Retrying is
safe only where the server cannot have started the turn: a connection refused before the
request was sent (:attr:`RemoteFault.retry_safe`), and a 429 whose ``Retry-After`` is short
(:func:`retry_after_s`).
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass

import httpx2

from app.errors import LlamaDeskError


class FaultKind(enum.Enum):
    DOWN = "down"  # nothing listens, or the name does not resolve
    CONNECT_TIMEOUT = "connect_timeout"
    READ_TIMEOUT = "read_timeout"  # the server went quiet
    AUTH = "auth"  # 401/403
    NOT_FOUND = "not_found"  # 404: wrong URL or model
    RATE_LIMITED = "rate_limited"  # 429
    BAD_REQUEST = "bad_request"  # another 4xx
    SERVER = "server"  # 5xx
    DROPPED = "dropped"  # the stream ended before the reply did
    MALFORMED = "malformed"  # not the SSE / JSON an OpenAI server sends


@dataclass(frozen=True)
class RemoteFault:
    kind: FaultKind
    message: str  # a sentence for the user
    status: int | None = None
    retry_after_s: float | None = None

    @property
    def retry_safe(self) -> bool:
        """Whether the request surely did not reach the server (so sending it again cannot
        run the turn twice)."""
        return self.kind in (FaultKind.DOWN, FaultKind.CONNECT_TIMEOUT)


class RemoteError(LlamaDeskError):
    """A remote request failed; ``fault`` says how."""

    def __init__(self, fault: RemoteFault) -> None:
        super().__init__(fault.message)
        self.fault = fault


def _server_said(body: str) -> str:
    """The server's own error message from an OpenAI-style error body (else the text)."""
    try:
        data = json.loads(body)
    except ValueError:
        return " ".join(body.split())[:200]
    if isinstance(data, dict):
        error = data.get("error", data)
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            return str(error["message"])[:300]
        if isinstance(error, str):
            return error[:300]
        if isinstance(data.get("detail"), str):  # vLLM / FastAPI
            return str(data["detail"])[:300]
    return ""


def retry_after_s(headers: httpx2.Headers) -> float | None:
    """A ``Retry-After`` given in seconds (an HTTP date is not waited for)."""
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        return None
    return seconds if seconds >= 0 else None


def status_fault(
    server: str, status: int, body: str, headers: httpx2.Headers, *, with_tools: bool = False
) -> RemoteFault:
    """``with_tools``: the request offered tools (a 400 then most often means the server
    does no tool calls, or cannot constrain them for this model)."""
    said = _server_said(body)
    tail = f' It said: "{said}"' if said else ""
    if status == 400 and with_tools:
        return RemoteFault(
            FaultKind.BAD_REQUEST,
            f"{server} refused the request with tools (HTTP 400): if it does not do tool "
            f"calls (llama-server needs --jinja), turn the tools off for this conversation."
            f"{tail}",
            status,
        )
    if status in (401, 403):
        return RemoteFault(
            FaultKind.AUTH,
            f"{server} refused the API key (HTTP {status}): check the key for this server.{tail}",
            status,
        )
    if status == 404:
        return RemoteFault(
            FaultKind.NOT_FOUND,
            f"{server} has no such model or route (HTTP 404): check the URL and the model "
            f"name.{tail}",
            status,
        )
    if status == 429:
        wait = retry_after_s(headers)
        when = f" It asks to wait {wait:g} s." if wait is not None else ""
        return RemoteFault(
            FaultKind.RATE_LIMITED,
            f"{server} is busy or rate-limited (HTTP 429): try again later.{when}{tail}",
            status,
            wait,
        )
    if 400 <= status < 500:
        return RemoteFault(
            FaultKind.BAD_REQUEST, f"{server} refused the request (HTTP {status}).{tail}", status
        )
    return RemoteFault(
        FaultKind.SERVER,
        f"{server} failed while answering (HTTP {status}): try again, or look at the "
        f"server's log.{tail}",
        status,
    )


def transport_fault(server: str, exc: httpx2.HTTPError, *, streaming: bool) -> RemoteFault:
    """A fault for a failed connection or read; ``streaming``: the reply had begun."""
    if isinstance(exc, httpx2.ConnectTimeout):
        return RemoteFault(
            FaultKind.CONNECT_TIMEOUT,
            f"{server} did not accept the connection in time: is it up and reachable?",
        )
    if isinstance(exc, httpx2.ConnectError):
        return RemoteFault(
            FaultKind.DOWN,
            f"Cannot reach {server}: nothing answers there (is the server running, and the "
            "address right?).",
        )
    if isinstance(exc, httpx2.ReadTimeout):
        return RemoteFault(
            FaultKind.READ_TIMEOUT,
            f"{server} stopped sending: it did not answer in time, so the reply was given up.",
        )
    if isinstance(exc, httpx2.SSEError):
        return RemoteFault(
            FaultKind.MALFORMED, f"{server} did not answer with an event stream: {exc}"
        )
    if streaming or isinstance(exc, (httpx2.RemoteProtocolError, httpx2.ReadError)):
        return RemoteFault(
            FaultKind.DROPPED, f"The connection to {server} broke off before the reply ended."
        )
    return RemoteFault(FaultKind.DOWN, f"Cannot talk to {server}: {exc}.")


def malformed(server: str, what: str) -> RemoteFault:
    return RemoteFault(FaultKind.MALFORMED, f"{server} sent something that is not {what}.")
